"""The low-latency mode of ``gshmem.moe.Buffer`` (decoding: at most 256 tokens per rank).

Fixed-size symmetric buffers, no host synchronisation and the same output shapes on every call,
so a CUDA graph can capture a dispatch and a combine and replay them. Each direction is a send
kernel and a receive kernel (src/moe/low_latency.cu); with ``return_recv_hook=True`` a call
queues only the send and returns a hook that queues the receive, so the caller can put other
work (the other micro-batch's attention, say) between the two.

A dispatch sends a token's row once to every rank it chose (at 4 ranks, top-8 of 256 experts,
~3.6 rows per token instead of one per choice), and the receiver packs each local expert's rows,
copying a token to each of its experts there, by source rank, then by source (token, choice);
every rank also learns every pair's expert and router weight. A combine sums, at
each expert rank, a token's expert outputs there times their weights (fp32, rounded once to the
tokens' dtype) and returns that one row to the sender, which adds its ranks' rows in fp32: a
token's choices on one rank travel together (at 4 ranks, top-8 of 256 experts, ~3.6 rows per
token instead of 8), as the high-throughput combine does.

With ``use_fp8=True`` the send kernel quantizes each row once to e4m3 with one float scale per
128 elements (scale = the group's largest magnitude / 448; values rounded to nearest, saturated),
half the bytes on the wire, and the receiver gets the e4m3 rows and their scales.

Memory per rank: ``world × max_tokens`` staged rows (each rank's tokens) plus ``8 × max_tokens``
combine rows and every rank's routing (``64 × world × max_tokens`` bytes), all symmetric; and
the dispatch's output, ``num_experts × max_tokens`` rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import torch

from gshmem._errors import UsageError
from gshmem.moe import kernels, routing
from gshmem.moe.context import FP8_GROUP

if TYPE_CHECKING:
    from gshmem.moe.context import Context

MAX_TOKENS = 256  # src/moe/low_latency.cu: kMaxLowLatencyTokens

# The calls of one round, in the order they must come (each half of a call counts).
_STEPS = ("low_latency_dispatch", "its receive hook", "low_latency_combine", "its receive hook")


@dataclass(frozen=True)
class LowLatencyHandle:
    """What a low-latency combine needs of its dispatch: the sender's routing (its weights
    travelled with the dispatch)."""

    topk: torch.Tensor  # [tokens, k] int64
    call: int  # the buffer's dispatch number that made it


class LowLatencyDispatched(NamedTuple):
    x: torch.Tensor  # [local experts, world * max_tokens, hidden]: x[l, :count[l]] are expert l's
    count: torch.Tensor  # [local experts] int32 (on the GPU): rows received per local expert
    src: torch.Tensor  # [local experts, world * max_tokens] int32: rank << 16 | token * 8 + choice
    handle: LowLatencyHandle
    recv_hook: Callable[[], None] | None  # queues the receive (None: already queued)
    scales: torch.Tensor | None  # FP8 only: [.., hidden / 128] float32, x * scale = the token

    @property
    def src_rank(self) -> torch.Tensor:
        """The rank each row came from (rows past ``count`` are undefined)."""
        return self.src >> 16

    @property
    def src_token(self) -> torch.Tensor:
        """Its token index there (rows past ``count`` are undefined)."""
        return (self.src & 0xFFFF) >> 3


class LowLatency:
    """Symmetric staging for every rank's tokens, a combine slot per (token, choice), counters
    and the receive bookkeeping. Collective to create."""

    def __init__(self, ctx: Context) -> None:
        if not 1 <= ctx.max_tokens <= MAX_TOKENS:
            raise UsageError(f"moe: low-latency buffers hold 1..{MAX_TOKENS} tokens per rank, "
                             f"got max_tokens={ctx.max_tokens}")  # fmt: skip
        comm, locals_, world, t = ctx.comm, ctx.per_rank, ctx.world, ctx.max_tokens
        device = f"cuda:{comm.device}"
        counters = comm.zeros((2, world), torch.int64)
        self.ctx = ctx
        self.bufs = kernels.LowLatencyBuffers(
            stage=comm.empty((world, t, ctx.hidden), ctx.dtype),
            src=comm.empty((locals_, world, t), torch.int32),
            count=comm.empty((locals_, world), torch.int32),
            route=comm.empty((world, t, routing.MAX_TOPK, 2), torch.int32),
            shape=comm.zeros((world,), torch.int32),
            comb=comm.empty((t * routing.MAX_TOPK, ctx.hidden), ctx.dtype),
            arrived=counters[0],
            ready=counters[1],
            calls=torch.zeros(2, dtype=torch.int64, device=device),
            finished=torch.zeros(2, dtype=torch.int32, device=device),
            out_src=torch.empty((locals_, world * t), dtype=torch.int32, device=device),
            out_count=torch.zeros(locals_, dtype=torch.int32, device=device),
        )
        self.step = 0  # index into _STEPS of the call due next
        self.dispatches = 0

    def _expect(self, step: int) -> None:
        if self.step != step:
            raise UsageError(f"moe: {_STEPS[step]} out of order: a low-latency round is dispatch, "
                             f"its receive, combine, its receive (due now: "
                             f"{_STEPS[self.step]})")  # fmt: skip
        self.step = (step + 1) % len(_STEPS)

    def _split(self, receive: Callable[[], None], step: int, hook: bool):
        def recv_hook() -> None:
            self._expect(step)
            receive()

        if hook:
            return recv_hook
        recv_hook()
        return None

    def dispatch(self, x: torch.Tensor, topk_idx: torch.Tensor, topk_weights: torch.Tensor,
                 return_recv_hook: bool = False, use_fp8: bool = False
                 ) -> LowLatencyDispatched:  # fmt: skip
        c = self.ctx
        x, topk, weights = c.dispatch_args(x, topk_idx, topk_weights, use_fp8)
        self._expect(0)
        kernels.ll_send(c.device_bytes, c.pes, c.me, x, topk, weights, c.num_experts,
                        self.bufs, c.blocks, use_fp8)  # fmt: skip
        self.dispatches += 1
        rows = (c.per_rank, c.world * c.max_tokens)
        out = torch.empty((*rows, c.hidden), dtype=torch.float8_e4m3fn if use_fp8 else c.dtype,
                          device=x.device)  # fmt: skip
        scales = (torch.empty((*rows, c.hidden // FP8_GROUP), dtype=torch.float32,
                              device=x.device) if use_fp8 else None)  # fmt: skip
        hook = self._split(
            lambda: kernels.ll_recv(c.device_bytes, c.pes, self.bufs, out, scales, c.blocks),
            1,
            return_recv_hook,
        )
        handle = LowLatencyHandle(topk, self.dispatches)
        return LowLatencyDispatched(out, self.bufs.out_count, self.bufs.out_src, handle, hook,
                                    scales)  # fmt: skip

    def combine(self, y: torch.Tensor, handle: LowLatencyHandle, return_recv_hook: bool = False):
        c = self.ctx
        if handle.call != self.dispatches:
            raise UsageError("moe: combine takes the handle of this buffer's latest dispatch")
        shape = (c.per_rank, c.world * c.max_tokens, c.hidden)
        if tuple(y.shape) != shape:
            raise UsageError(f"moe: y must be {list(shape)} (the dispatch's x), got "
                             f"{tuple(y.shape)}")  # fmt: skip
        c.rows_in("y", y.reshape(-1, c.hidden), None)
        self._expect(2)
        y = y.contiguous()
        kernels.ll_combine_send(c.device_bytes, c.pes, c.me, y, self.bufs, c.blocks)
        out = torch.empty((handle.topk.shape[0], c.hidden), dtype=c.dtype, device=y.device)
        hook = self._split(
            lambda: kernels.ll_combine_recv(
                c.device_bytes, c.pes, self.bufs, handle.topk, out, c.blocks
            ),  # fmt: skip
            3,
            return_recv_hook,
        )
        return (out, hook) if return_recv_hook else out


__all__ = ["MAX_TOKENS", "LowLatency", "LowLatencyDispatched", "LowLatencyHandle"]
