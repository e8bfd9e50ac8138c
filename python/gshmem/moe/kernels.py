"""The dispatch/combine kernels (src/moe/kernels.cu, libgshmem_moe.so) called from Python: each
function queues one kernel on torch's current stream and returns at once."""

from __future__ import annotations

import ctypes
import functools
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


__all__ = ["Route", "dispatch", "library", "pull", "reduce", "wait"]
