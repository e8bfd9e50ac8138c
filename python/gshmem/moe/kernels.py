"""The dispatch/combine kernels (src/moe/kernels.cu, libgshmem_moe.so) called from Python: each
function queues one kernel on torch's current stream and returns at once."""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from gshmem._errors import UsageError
from gshmem._native import load

if TYPE_CHECKING:
    import torch

_P, _I, _L, _U = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_uint64
# One C signature per entry (tests/cpu/test_moe_abi.py checks them against src/moe/*.cu).
# fmt: off
_SIGNATURES = {
    "gshmem_moe_layout": [_P, _L, _I, _I, _I, _I, _I, _P, _P, _P, _P, _P, _P],
    "gshmem_moe_return": [_P, _P, _I, _I, _P, _P, _P, _L, _P, _P, _I, _P],
    "gshmem_moe_dispatch": [_P, _P, _P, _P, _P, _I, _I, _I, _L, _P, _I, _I, _P, _L, _P, _P, _I, _I,
                            _P, _P, _P, _P, _P, _P, _P, _I, _P],
    "gshmem_moe_wait": [_P, _P, _P, _I, _U, _P],
    "gshmem_moe_check": [_P, _I, _I, _I, _L, _P],
    "gshmem_moe_padded_pairs": [_P, _I, _I, _I, _P, _P, _P, _P, _L, _P, _P, _P, _P, _P, _P, _P,
                                _P],
    "gshmem_moe_reduce": [_P, _P, _P, _I, _I, _I, _I, _P, _L, _P, _P, _I, _L, _L, _P, _P, _P, _L,
                          _P, _I, _P],
    "gshmem_moe_pull": [_P, _P, _P, _P, _P, _I, _I, _I, _L, _I, _P, _L, _P, _P, _U, _L, _I, _P],
    "gshmem_moe_ll_send": [_P, _P, _I, _I, _I, _I, _P, _L, _I, _P, _P, _I, _I, _I, _I, _P, _P, _P,
                           _P, _P, _P, _I, _P],
    "gshmem_moe_ll_recv": [_P, _P, _I, _I, _I, _L, _L, _I, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P,
                           _I, _P],
    "gshmem_moe_ll_combine_send": [_P, _P, _I, _I, _I, _I, _I, _L, _P, _P, _P, _P, _P, _P, _I, _P],
    "gshmem_moe_ll_combine_recv": [_P, _P, _I, _I, _I, _I, _I, _P, _L, _P, _P, _P, _P, _P, _I,
                                   _P],
}
# fmt: on


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


TILE = 128  # tokens per layout tile (src/moe/kernels.cu: kTile)


class Route:
    """One dispatch's layout on the GPU (what the layout kernel computed and every rank's counts,
    ``all_counts``, once exchanged): what the dispatch, pull and backward kernels read."""

    def __init__(self, device: bytes, pes: torch.Tensor, me: int, num_experts: int,
                 layout: Layout) -> None:  # fmt: skip
        self.device, self.pes, self.me, self.num_experts = device, pes, me, num_experts
        self.layout, self.all_counts = layout, None
        self.world, self.tokens = pes.numel(), layout.token_pos.shape[0]


class Layout:
    """The layout kernel's outputs, carved from one int32 allocation: ``totals`` ``[world + E +
    2]`` (this rank's tokens per rank, pairs per expert, out-of-range indices, the host's flag),
    ``token_pos`` ``[tokens, world]``, ``pair_pos`` ``[tokens * k]`` and ``tile_base``
    ``[tiles, world + E]``."""

    def __init__(self, tokens: int, k: int, world: int, num_experts: int, device) -> None:
        import torch

        columns, tiles = world + num_experts, max(1, -(-tokens // TILE))
        sizes = [columns + 2, tokens * world, tokens * k, tiles * columns]
        flat = torch.empty(sum(sizes), dtype=torch.int32, device=device)
        self.totals, token_pos, self.pair_pos, tile_base = flat.split(sizes)
        self.token_pos = token_pos.view(tokens, world)
        self.tile_base = tile_base.view(tiles, columns)


def layout(topk, num_experts: int, world: int, finished, flag: int) -> Layout:
    """Queues the layout kernel for ``topk`` (``[tokens, k]`` int64); ``flag`` rides along as the
    totals' last entry."""
    tokens, k = topk.shape
    out = Layout(tokens, k, world, num_experts, topk.device)
    _call("gshmem_moe_layout", topk.data_ptr(), tokens, k, num_experts, world,
          num_experts // world, flag, out.token_pos.data_ptr(), out.pair_pos.data_ptr(),
          out.tile_base.data_ptr(), out.totals.data_ptr(), finished.data_ptr(),
          _stream(topk.device.index))  # fmt: skip
    return out


def _route_args(r: Route) -> tuple:
    lay = r.layout
    return (_dev(r.device), r.pes.data_ptr(), lay.token_pos.data_ptr(), lay.tile_base.data_ptr(),
            r.all_counts.data_ptr(), r.world, r.me, r.num_experts, r.tokens)  # fmt: skip


def dispatch(r: Route, x, topk, weights, per_rank: int, recv, arrived, blocks: int,
             fp8: bool = False) -> None:  # fmt: skip
    """Rows of ``x`` (``fp8``: their e4m3 form, then a float scale per 128 elements) into every
    receiver's ``recv[0]``, each pair into its slot of ``recv[1:]`` (slot per (row, choice),
    pair row, weight, source rank, source token)."""
    _call("gshmem_moe_dispatch", *_route_args(r), r.layout.pair_pos.data_ptr(),
          _dtype_code(x), int(fp8), x.data_ptr(),
          x.shape[1] * x.element_size(), topk.data_ptr(), weights.data_ptr(), topk.shape[1],
          per_rank, *(t.data_ptr() for t in recv), arrived.data_ptr(), blocks,
          _stream(x.device.index))  # fmt: skip


def check(r: Route, worst_pairs: int) -> None:
    """Queues a check of every rank's exchanged counts that stops the kernels (a device trap
    with a message) if a rank's routing held an expert index out of range or this rank receives
    more than ``worst_pairs`` pairs: a dispatch without a host synchronisation cannot raise."""
    _call("gshmem_moe_check", r.all_counts.data_ptr(), r.world, r.me, r.num_experts,
          worst_pairs, _stream(r.pes.device.index))  # fmt: skip


class PaddedPairs(NamedTuple):
    """A dispatch's received pairs, ``worst`` of them: those that arrived, then padding (row 0,
    weight 0, sources -1)."""

    row: torch.Tensor  # [worst] int64
    weight: torch.Tensor  # [worst] float32
    src_rank: torch.Tensor  # [worst] int32
    src_code: torch.Tensor  # [worst] int32: token * 8 + choice at the sender
    rank: torch.Tensor  # [worst] int64: src_rank widened
    token: torch.Tensor  # [worst] int64: the token of src_code
    per_expert: torch.Tensor  # [local experts] int64: pairs received per local expert


def padded_pairs(r: Route, row, weight, src_rank, src_code, worst: int) -> PaddedPairs:
    """Queues one kernel that reads how many pairs arrive from the exchanged counts (on the GPU:
    no host synchronisation) and fills ``worst`` of each output from the receive arrays."""
    import torch

    dev, i64 = row.device, torch.int64
    out = PaddedPairs(torch.empty(worst, dtype=i64, device=dev),
                      torch.empty(worst, dtype=torch.float32, device=dev),
                      torch.empty(worst, dtype=torch.int32, device=dev),
                      torch.empty(worst, dtype=torch.int32, device=dev),
                      torch.empty(worst, dtype=i64, device=dev),
                      torch.empty(worst, dtype=i64, device=dev),
                      torch.empty(r.num_experts // r.world, dtype=i64, device=dev))  # fmt: skip
    _call("gshmem_moe_padded_pairs", r.all_counts.data_ptr(), r.world, r.me, r.num_experts,
          row.data_ptr(), weight.data_ptr(), src_rank.data_ptr(), src_code.data_ptr(), worst,
          *(t.data_ptr() for t in out), _stream(dev.index))  # fmt: skip
    return out


def return_values(r: Route, values, src_rank, src_code, dest, returned, blocks: int) -> None:
    """``values[p]`` (float32) to rank ``src_rank[p]``'s ``dest[src_code[p]]`` (none where
    ``src_rank[p]`` is -1); then signals."""
    _call("gshmem_moe_return", _dev(r.device), r.pes.data_ptr(), r.world, r.me,
          values.data_ptr(), src_rank.data_ptr(), src_code.data_ptr(), values.numel(),
          dest.data_ptr(), returned.data_ptr(), blocks, _stream(values.device.index))  # fmt: skip


def wait(device: bytes, pes, counters, target: int) -> None:
    """The stream waits until every counter (one per rank) has reached ``target`` (bounded: a
    rank that never arrives becomes the comm's fault)."""
    _call("gshmem_moe_wait", _dev(device), pes.data_ptr(), counters.data_ptr(), counters.numel(),
          target, _stream(counters.device.index))  # fmt: skip


def reduce(r: Route, y, slot, pair_weight, rows: int, comb, ready, blocks: int,
           push: tuple[torch.Tensor, torch.Tensor, int] | None = None) -> None:  # fmt: skip
    """Each received row's (weighted) sum of its pairs' rows of ``y`` into ``comb``: this rank's
    (pull), or with ``push`` = (each pair's sender, its token * 8 + choice there, max_tokens)
    the row's sender's, at row (this rank) * max_tokens + token; then each block signals
    ``ready`` at every rank. ``ready`` None: the sums only (``comb`` any ``[rows, hidden]``
    buffer; not with ``push``). ``rows``: the received rows or an upper bound (the kernel stops
    at the count ``r.all_counts`` gives); 0: the signal only."""
    src_rank, src_code, max_tokens = push if push is not None else (None, None, 0)
    _call("gshmem_moe_reduce", _dev(r.device), r.pes.data_ptr(), r.all_counts.data_ptr(),
          r.world, r.me, r.num_experts, _dtype_code(y),
          y.data_ptr(), y.stride(0) * y.element_size(), slot.data_ptr(),
          None if pair_weight is None else pair_weight.data_ptr(), slot.shape[1], rows,
          y.shape[1] * y.element_size(), comb.data_ptr(),
          None if src_rank is None else src_rank.data_ptr(),
          None if src_code is None else src_code.data_ptr(), max_tokens,
          None if ready is None else ready.data_ptr(), blocks, _stream(y.device.index))  # fmt: skip


def pull(r: Route, comb, out, ready, target: int, blocks: int, pushed_max_tokens: int = 0) -> None:
    """Each token's sum of its rows, once ``ready`` reached ``target``: read from every rank's
    ``comb`` (pull), or from this rank's where a pushing reduce left them (``pushed_max_tokens``:
    that reduce's max_tokens)."""
    _call("gshmem_moe_pull", *_route_args(r), _dtype_code(out), comb.data_ptr(),
          out.shape[1] * out.element_size(), out.data_ptr(), ready.data_ptr(), target,
          pushed_max_tokens, blocks, _stream(out.device.index))  # fmt: skip


@dataclass(frozen=True)
class LowLatencyBuffers:
    """A low-latency buffer's device memory (src/moe/low_latency.cu describes each)."""

    stage: torch.Tensor  # symmetric [world, T, hidden]
    src: torch.Tensor  # symmetric [locals, world, T] int32
    count: torch.Tensor  # symmetric [locals, world] int32
    route: torch.Tensor  # symmetric [world, T, 8, 2] int32: each sender's pairs
    shape: torch.Tensor  # symmetric [world] int32: each sender's tokens << 4 | k
    comb: torch.Tensor  # symmetric [T * 8, hidden]
    arrived: torch.Tensor  # symmetric [world] int64
    ready: torch.Tensor  # symmetric [world] int64
    calls: torch.Tensor  # [2] int64: dispatches, combines received
    finished: torch.Tensor  # [2] int32: blocks done with the current receive
    out_src: torch.Tensor  # [locals, world * T] int32: each packed row's source
    out_count: torch.Tensor  # [locals] int32: packed rows per local expert


def ll_send(device: bytes, pes, me: int, x, topk, weights, num_experts: int,
            b: LowLatencyBuffers, blocks: int, fp8: bool) -> None:  # fmt: skip
    """Each token's row (FP8: its e4m3 form and scales) into the stage of every rank it chose;
    every expert's count; every pair (expert, index, weight) to every rank."""
    locals_, world, max_tokens = b.count.shape[0], pes.numel(), b.src.shape[2]
    _call("gshmem_moe_ll_send", _dev(device), pes.data_ptr(), world, me, _dtype_code(x),
          int(fp8), x.data_ptr(), x.shape[1] * x.element_size(), x.shape[0], topk.data_ptr(),
          weights.data_ptr(), topk.shape[1], num_experts, locals_, max_tokens,
          b.stage.data_ptr(), b.src.data_ptr(), b.count.data_ptr(), b.route.data_ptr(),
          b.shape.data_ptr(), b.arrived.data_ptr(), blocks, _stream(x.device.index))  # fmt: skip


def ll_recv(device: bytes, pes, b: LowLatencyBuffers, out, scales, blocks: int) -> None:
    """Waits for every sender, then packs the staged rows into ``out`` ``[locals, world*T, h]``
    (FP8: and their scales into ``scales`` ``[locals, world*T, h / 128]``)."""
    locals_, world, max_tokens = b.src.shape
    _call("gshmem_moe_ll_recv", _dev(device), pes.data_ptr(), world, locals_, max_tokens,
          b.stage.shape[2] * b.stage.element_size(), out.shape[2] * out.element_size(),
          0 if scales is None else scales.shape[2], b.stage.data_ptr(), b.src.data_ptr(),
          b.count.data_ptr(), b.arrived.data_ptr(), b.calls.data_ptr(), b.finished.data_ptr(),
          out.data_ptr(), None if scales is None else scales.data_ptr(), b.out_src.data_ptr(),
          b.out_count.data_ptr(), blocks, _stream(out.device.index))  # fmt: skip


def ll_combine_send(device: bytes, pes, me: int, y, b: LowLatencyBuffers, blocks: int) -> None:
    """Per (sender, token) with choices here: their rows of ``y`` times the sender's weights,
    summed, into the sender's slot for this rank."""
    locals_, world, max_tokens = b.src.shape
    _call("gshmem_moe_ll_combine_send", _dev(device), pes.data_ptr(), _dtype_code(y), world, me,
          locals_, max_tokens, y.shape[2] * y.element_size(), y.data_ptr(), b.count.data_ptr(),
          b.route.data_ptr(), b.shape.data_ptr(), b.comb.data_ptr(), b.ready.data_ptr(), blocks,
          _stream(y.device.index))  # fmt: skip


def ll_combine_recv(device: bytes, pes, b: LowLatencyBuffers, topk, out, blocks: int) -> None:
    """Waits for every rank, then each token's sum of the rows its ranks returned into ``out``."""
    _call("gshmem_moe_ll_combine_recv", _dev(device), pes.data_ptr(), _dtype_code(out),
          b.ready.numel(), b.count.shape[0], out.shape[0], topk.shape[1], topk.data_ptr(),
          out.shape[1] * out.element_size(), b.comb.data_ptr(), b.ready.data_ptr(),
          b.calls[1:].data_ptr(), b.finished[1:].data_ptr(), out.data_ptr(), blocks,
          _stream(out.device.index))  # fmt: skip


__all__ = [
    "TILE",
    "Layout",
    "LowLatencyBuffers",
    "PaddedPairs",
    "Route",
    "dispatch",
    "layout",
    "library",
    "ll_combine_recv",
    "ll_combine_send",
    "ll_recv",
    "ll_send",
    "padded_pairs",
    "pull",
    "reduce",
    "return_values",
    "wait",
]
