"""The dispatch/combine kernels (src/moe/kernels.cu, libgshmem_moe.so) called from Python: each
function queues one kernel on torch's current stream and returns at once."""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gshmem._errors import UsageError
from gshmem._native import load

if TYPE_CHECKING:
    import torch

_P, _I, _L, _U = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_uint64
_SIGNATURES = {
    "gshmem_moe_dispatch": [
        _P,
        _P,
        _P,
        _P,
        _I,
        _I,
        _L,
        _P,
        _L,
        _P,
        _P,
        _I,
        _I,
        _P,
        _P,
        _P,
        _P,
        _P,
        _I,
        _P,
    ],  # fmt: skip
    "gshmem_moe_wait": [_P, _I, _U, _P],
    "gshmem_moe_reduce": [_P, _P, _I, _I, _I, _P, _L, _P, _P, _I, _L, _L, _P, _P, _I, _P],
    "gshmem_moe_pull": [_P, _P, _P, _P, _I, _I, _L, _I, _P, _L, _P, _P, _U, _I, _P],
    "gshmem_moe_ll_send": [_P, _P, _I, _I, _P, _L, _I, _P, _I, _I, _I, _I, _P, _P, _P, _P, _I, _P],
    "gshmem_moe_ll_recv": [_I, _I, _I, _L, _P, _P, _P, _P, _P, _P, _P, _P, _P, _I, _P],
    "gshmem_moe_ll_combine_send": [_P, _P, _I, _I, _I, _I, _L, _P, _P, _P, _P, _P, _I, _P],
    "gshmem_moe_ll_combine_recv": [_I, _I, _I, _I, _P, _P, _L, _P, _P, _P, _P, _P, _I, _P],
}


@functools.cache
def library() -> ctypes.CDLL:
    lib = load("gshmem_moe", "reinstall gshmem (pip install --no-build-isolation -e .)")
    for name, args in _SIGNATURES.items():
        getattr(lib, name).argtypes = args
        getattr(lib, name).restype = ctypes.c_int
    lib.gshmem_moe_last_error.restype = ctypes.c_char_p
    return lib


def _call(name: str, *args) -> None:
    lib = library()
    if getattr(lib, name)(*args) != 0:
        raise UsageError(lib.gshmem_moe_last_error().decode())


def _stream(device: int) -> int:
    import torch

    return torch.cuda.current_stream(device).cuda_stream


def _dtype_code(t: torch.Tensor) -> int:
    import torch

    return {torch.bfloat16: 0, torch.float16: 1}[t.dtype]


@functools.cache
def _device_arg(raw: bytes) -> ctypes.Array:
    return ctypes.create_string_buffer(raw, len(raw))


def _dev(handle: bytes) -> int:
    return ctypes.addressof(_device_arg(handle))


class Route:
    """What every kernel of one routing needs on the GPU: the team's world PEs, this rank's plan
    (``position``) and its rows' offsets at each receiver."""

    def __init__(self, device: bytes, pes: torch.Tensor, me: int, position, offsets) -> None:
        self.device, self.pes, self.me = device, pes, me
        self.position, self.offsets = position, offsets
        self.world, self.tokens = pes.numel(), position.shape[0]


def dispatch(r: Route, x, topk, weights, per_rank: int, recv, arrived, blocks: int) -> None:
    """Rows of ``x`` (and their top-k) into every receiver's ``recv`` (x, src, local, weights)."""
    recv_x, recv_src, recv_local, recv_weights = recv
    _call("gshmem_moe_dispatch", _dev(r.device), r.pes.data_ptr(), r.position.data_ptr(),
          r.offsets.data_ptr(), r.world, r.me, r.tokens, x.data_ptr(),
          x.shape[1] * x.element_size(), topk.data_ptr(), weights.data_ptr(), topk.shape[1],
          per_rank, recv_x.data_ptr(), recv_src.data_ptr(), recv_local.data_ptr(),
          recv_weights.data_ptr(), arrived.data_ptr(), blocks, _stream(x.device.index))  # fmt: skip


def wait(counters, target: int) -> None:
    """The stream waits until every counter (one per rank) has reached ``target``."""
    _call("gshmem_moe_wait", counters.data_ptr(), counters.numel(), target,
          _stream(counters.device.index))  # fmt: skip


def reduce(r: Route, y, slot, pair_weight, rows: int, comb, ready, blocks: int) -> None:
    """Each received row's (weighted) sum of its pairs' rows of ``y`` into ``comb``."""
    _call("gshmem_moe_reduce", _dev(r.device), r.pes.data_ptr(), r.world, r.me, _dtype_code(y),
          y.data_ptr(), y.stride(0) * y.element_size(), slot.data_ptr(),
          None if pair_weight is None else pair_weight.data_ptr(), slot.shape[1], rows,
          y.shape[1] * y.element_size(), comb.data_ptr(), ready.data_ptr(), blocks,
          _stream(y.device.index))  # fmt: skip


def pull(r: Route, comb, out, ready, target: int, blocks: int) -> None:
    """Each token's sum of its rows in every rank's ``comb``, once ``ready`` reached ``target``."""
    _call("gshmem_moe_pull", _dev(r.device), r.pes.data_ptr(), r.position.data_ptr(),
          r.offsets.data_ptr(), r.world, r.me, r.tokens, _dtype_code(out), comb.data_ptr(),
          out.shape[1] * out.element_size(), out.data_ptr(), ready.data_ptr(), target, blocks,
          _stream(out.device.index))  # fmt: skip


@dataclass(frozen=True)
class LowLatencyBuffers:
    """A low-latency buffer's device memory (src/moe/low_latency.cu describes each)."""

    stage: torch.Tensor  # symmetric [locals, world, T, hidden]
    src: torch.Tensor  # symmetric [locals, world, T] int32
    count: torch.Tensor  # symmetric [locals, world] int32
    comb: torch.Tensor  # symmetric [T * 8, hidden]
    arrived: torch.Tensor  # symmetric [world] int64
    ready: torch.Tensor  # symmetric [world] int64
    calls: torch.Tensor  # [2] int64: dispatches, combines received
    finished: torch.Tensor  # [2] int32: blocks done with the current receive
    out_src: torch.Tensor  # [locals, world * T] int32: each packed row's source
    out_count: torch.Tensor  # [locals] int32: packed rows per local expert


def ll_send(device: bytes, pes, me: int, x, topk, num_experts: int, b: LowLatencyBuffers,
            blocks: int) -> None:  # fmt: skip
    """Each (token, choice) pair's row into its expert's rank's stage; every expert's count."""
    locals_, world, max_tokens = b.count.shape[0], pes.numel(), b.src.shape[2]
    _call("gshmem_moe_ll_send", _dev(device), pes.data_ptr(), world, me, x.data_ptr(),
          x.shape[1] * x.element_size(), x.shape[0], topk.data_ptr(), topk.shape[1],
          num_experts, locals_, max_tokens, b.stage.data_ptr(), b.src.data_ptr(),
          b.count.data_ptr(), b.arrived.data_ptr(), blocks, _stream(x.device.index))  # fmt: skip


def ll_recv(b: LowLatencyBuffers, out, blocks: int) -> None:
    """Waits for every sender, then packs the staged rows into ``out`` ``[locals, world*T, h]``."""
    locals_, world, max_tokens = b.src.shape
    _call("gshmem_moe_ll_recv", world, locals_, max_tokens, out.shape[2] * out.element_size(),
          b.stage.data_ptr(), b.src.data_ptr(), b.count.data_ptr(), b.arrived.data_ptr(),
          b.calls.data_ptr(), b.finished.data_ptr(), out.data_ptr(), b.out_src.data_ptr(),
          b.out_count.data_ptr(), blocks, _stream(out.device.index))  # fmt: skip


def ll_combine_send(device: bytes, pes, me: int, y, b: LowLatencyBuffers, blocks: int) -> None:
    """Each valid packed row of ``y`` back to its sender's slot for (token, choice)."""
    locals_, world, max_tokens = b.src.shape
    _call("gshmem_moe_ll_combine_send", _dev(device), pes.data_ptr(), world, me, locals_,
          max_tokens, y.shape[2] * y.element_size(), y.data_ptr(), b.out_src.data_ptr(),
          b.out_count.data_ptr(), b.comb.data_ptr(), b.ready.data_ptr(), blocks,
          _stream(y.device.index))  # fmt: skip


def ll_combine_recv(b: LowLatencyBuffers, topk, weights, out, blocks: int) -> None:
    """Waits for every rank, then each token's weighted sum of its returned rows into ``out``."""
    _call("gshmem_moe_ll_combine_recv", _dtype_code(out), b.ready.numel(), out.shape[0],
          topk.shape[1], topk.data_ptr(), weights.data_ptr(), out.shape[1] * out.element_size(),
          b.comb.data_ptr(), b.ready.data_ptr(), b.calls[1:].data_ptr(),
          b.finished[1:].data_ptr(), out.data_ptr(), blocks, _stream(out.device.index))  # fmt: skip


__all__ = [
    "LowLatencyBuffers",
    "Route",
    "dispatch",
    "library",
    "ll_combine_recv",
    "ll_combine_send",
    "ll_recv",
    "ll_send",
    "pull",
    "reduce",
    "wait",
]
