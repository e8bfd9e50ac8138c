"""``gshmem.moe.Buffer``: expert-parallel dispatch and combine over a team's symmetric memory.

One class, two modes chosen when it is made (as the memory they need differs):

* high throughput (default; training, prefill): ``dispatch`` / ``combine``, expert-major rows,
  one host synchronisation per dispatch, differentiable (high_throughput.py);
* low latency (``low_latency=True``; decoding, at most 256 tokens per rank):
  ``low_latency_dispatch`` / ``low_latency_combine``, fixed shapes, no host synchronisation,
  CUDA-graph capturable, send and receive halves (low_latency.py).

Both move rows with SM loads and stores over NVLink from ``blocks`` thread blocks per kernel, so
every rank of the team must be load/store-reachable (one host).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from gshmem._errors import UsageError
from gshmem.moe import routing
from gshmem.moe.context import Context
from gshmem.moe.high_throughput import (
    COMBINES,
    Dispatched,
    Handle,
    HighThroughput,
    combine_mode,
)
from gshmem.moe.low_latency import LowLatency, LowLatencyDispatched, LowLatencyHandle

if TYPE_CHECKING:
    from gshmem import Comm
    from gshmem.team import Team

DTYPES = (torch.bfloat16, torch.float16)
MAX_WORLD = 32  # one warp's lanes, one per rank, in the kernels
# Thread blocks per kernel by default: few SMs for bulk transfers (they leave the rest to
# computation), more for low latency, where in-flight rows decide the time (one H100, 128 tokens:
# a dispatch + combine round takes 82 µs with 24 blocks, 50 µs with 96).
HIGH_THROUGHPUT_BLOCKS, LOW_LATENCY_BLOCKS = 24, 96


def _same_combine(comm: Comm, team: Team, combine: str) -> str:
    """Collective: ``combine``, once every rank of ``team`` is known to use it (a rank pushing
    to one that pulls would leave wrong sums, not a hang); every rank raises alike otherwise."""
    mine = torch.tensor([COMBINES.index(combine)], dtype=torch.int32, device=f"cuda:{comm.device}")
    modes = [COMBINES[int(m)] for m in comm.all_gather(mine, team=team).view(-1).tolist()]
    if len(set(modes)) > 1:
        raise UsageError(f"moe.Buffer: the team's ranks chose different combines ({modes}); pass "
                         "the same combine= (or GSHMEM_MOE_COMBINE) on every rank")  # fmt: skip
    return combine


class Buffer:
    """Symmetric buffers for tokens of ``hidden`` elements of ``dtype``, at most ``max_tokens``
    per rank per dispatch, routed to ``num_experts`` experts spread evenly over ``team`` (default:
    every PE of ``comm``; expert ``e`` on rank ``e // (num_experts / world)``). Collective and
    blocking to create (waits for this GPU's work and for every rank). Every call queues its
    kernels on torch's current stream (a receive hook on the stream current when it is called);
    a low-latency round is dispatch, its receive, combine, its receive, in that order on every
    rank. Memory (symmetric): high throughput about ``2 × max_tokens × world`` rows; low
    latency ``(world + 8) × max_tokens`` rows (each dispatch's output: ``num_experts ×
    max_tokens`` more, not symmetric). ``blocks``: thread blocks of every kernel
    (default 24 in high-throughput mode, 96 in low latency); the same on every rank.
    ``combine`` (high throughput): how combines bring each token's sums back to its rank,
    ``"push"`` (every expert rank writes them into the sender's buffer) or ``"pull"`` (the
    sender reads them at every expert rank); default GSHMEM_MOE_COMBINE, else push below 4 ranks
    and pull from 4 (each measured faster there); the same on every rank. It decides the
    combines of expert outputs per pair; token-row combines always pull."""

    def __init__(
        self,
        comm: Comm,
        hidden: int,
        max_tokens: int,
        num_experts: int,
        *,
        dtype: torch.dtype = torch.bfloat16,
        team: Team | None = None,
        blocks: int | None = None,
        low_latency: bool = False,
        combine: str | None = None,
    ) -> None:
        team = comm.team_world() if team is None else team
        if team.rank < 0:
            raise UsageError(f"moe.Buffer: PE {comm.rank} is not a member of {team}")
        if dtype not in DTYPES:
            raise UsageError(f"moe.Buffer: dtype must be bfloat16 or float16, got {dtype}")
        if hidden <= 0 or (hidden * torch.empty((), dtype=dtype).element_size()) % 16:
            raise UsageError(f"moe.Buffer: a token's row must be a multiple of 16 bytes "
                             f"(hidden a multiple of 8), got hidden={hidden}")  # fmt: skip
        world = team.size
        if world > MAX_WORLD:
            raise UsageError(f"moe.Buffer: at most {MAX_WORLD} ranks (a team of {world})")
        if num_experts < world or num_experts % world:
            raise UsageError(f"moe.Buffer: {num_experts} experts do not split over {world} ranks")
        if num_experts > routing.MAX_EXPERTS:
            raise UsageError(f"moe.Buffer: at most {routing.MAX_EXPERTS} experts, got "
                             f"{num_experts}")  # fmt: skip
        if blocks is None:
            blocks = LOW_LATENCY_BLOCKS if low_latency else HIGH_THROUGHPUT_BLOCKS
        if blocks < 1:
            raise UsageError(f"moe.Buffer: blocks must be at least 1, got {blocks}")
        if low_latency and combine is not None:
            raise UsageError("moe.Buffer: combine= chooses the high-throughput combine; a "
                             "low-latency buffer has one")  # fmt: skip
        base = comm.heap_info()["heap_base"]
        if any(comm.ptr(base, pe) is None for pe in team.members()):
            raise UsageError("moe.Buffer: every rank of the team must be load/store-reachable "
                             "(one host, P2P on)")  # fmt: skip
        pes = torch.tensor(team.members(), dtype=torch.int32, device=f"cuda:{comm.device}")
        if not low_latency:
            combine = _same_combine(comm, team, combine_mode(world, combine))
        self.ctx = Context(comm, team, world, team.rank, hidden, max_tokens, num_experts, dtype,
                           int(blocks), pes, bytes(comm.device_handle()))  # fmt: skip
        self._ll = LowLatency(self.ctx) if low_latency else None
        self._ht = None if low_latency else HighThroughput(self.ctx, combine)
        torch.cuda.synchronize(comm.device)
        comm.barrier()

    def _mode(self, low_latency: bool):
        # A rank that died or never came made the kernels give up (GSHMEM_TIMEOUT): every call
        # after that raises gshmem.FaultError naming it, before queueing anything.
        self.ctx.comm.check()
        engine = self._ll if low_latency else self._ht
        if engine is None:
            made = "high-throughput" if low_latency else "low-latency"
            use = "low_latency_dispatch/_combine" if self._ll else "dispatch/combine"
            raise UsageError(f"moe: this is a {made} buffer (made with low_latency="
                             f"{self._ll is not None}); use {use}")  # fmt: skip
        return engine

    # -- high throughput -------------------------------------------------------------------------
    def dispatch(self, x: torch.Tensor, topk_idx: torch.Tensor, topk_weights: torch.Tensor, *,
                 use_fp8: bool = False, num_worst_rows: int | None = None,
                 token_rows: bool = False) -> Dispatched:  # fmt: skip
        """Collective over the team: sends each token of ``x`` (``[tokens, hidden]``) to the
        ranks of its ``topk_idx`` experts (``[tokens, k]``, k <= 8, -1: none; ``topk_weights``
        float32 of the same shape) and returns what this rank received, one row per (token,
        local expert) pair, rows of expert 0 first, within an expert by source rank then token.
        A token with several experts on one rank travels there once. Differentiable in ``x``
        (its backward is a combine). Synchronises the host once (to size the outputs and check
        every rank's expert indices: a bad index anywhere raises on every rank, before anything
        is sent). The next call on this buffer must be ``combine``. ``use_fp8``: the rows travel
        as e4m3 with a float32 scale per 128 elements (as in ``low_latency_dispatch``); ``x`` is
        then float8_e4m3fn, ``scales`` ``[pairs, hidden / 128]``, and not differentiable.

        ``num_worst_rows`` (an upper bound on the rows this rank receives, at most
        ``max_tokens × world × min(local experts, 8)``): never synchronises the host. ``x``,
        ``weights``, ``src_rank`` and ``src_token`` then have exactly that many rows; past the
        received ones ``x`` is undefined, ``weights`` 0 and the sources -1, and
        ``tokens_per_expert`` is an int64 tensor on the GPU (its sum: the rows received). An
        expert index outside [-1, num_experts) on any rank, or more rows than the bound, stops
        the kernels with a message naming it (a device trap: the CUDA context is lost; there is
        no host synchronisation to raise from). The router weights' gradient flows when this
        rank's ``topk_weights`` need one, which must then be so on every rank (without the
        synchronisation the ranks cannot learn it from each other).

        ``token_rows``: ``x`` is instead the buffer's received rows as they arrived, one per
        (sender, token) (a token with several experts here is there once), and ``row``
        ``[pairs]`` the row of ``x`` each pair reads, in the expert order above: an expert
        computes on ``x[row[a:b]]`` (gathered on load by a grouped GEMM, say) and ``combine``
        takes its outputs per pair as usual, or ``reduce_pairs`` sums them per row for
        ``combine(..., token_rows=True)``. This skips the copy into expert order (at 4096
        tokens, DeepSeek-V3 shapes, 4 ranks: ~470 MB). ``x`` (and ``scales``) are views of the
        buffer, valid until its next dispatch-kind call (a dispatch, or a combine's backward);
        not differentiable (a ``UsageError`` if ``x`` needs a gradient)."""
        return self._mode(False).dispatch(x, topk_idx, topk_weights, use_fp8, num_worst_rows,
                                          token_rows)  # fmt: skip

    def combine(self, y: torch.Tensor, handle: Handle, *, token_rows: bool = False) -> torch.Tensor:
        """Collective over the team: ``out[t]`` = the sum over token t's top-k choices of the
        router weight times that expert's row of ``y`` (``[pairs, hidden]``, in the order
        ``dispatch`` returned), at the rank that sent t; fp32 accumulation. Differentiable in
        ``y``. No host synchronisation; the next call on this buffer must be a dispatch.

        ``token_rows``: ``y`` is instead one row per received (sender, token), ``[rows,
        hidden]`` with the rows of ``dispatch(..., token_rows=True)``'s ``x`` (what
        ``reduce_pairs`` returns: each row already the weighted sum of its experts' outputs),
        and ``out[t]`` is the sum of t's rows over the ranks it went to. Only those rows travel:
        each sender reads its tokens' rows from every rank they went to (pulled, whatever
        ``combine=`` says: measured 2x faster than pushing them), straight from
        ``reduce_pairs``' result (any other ``y`` is first copied into the buffer by a copy
        engine). Every rank passes the same ``token_rows``. Not differentiable (a
        ``UsageError`` if ``y`` needs a gradient)."""
        return self._mode(False).combine(y, handle, token_rows)

    def reduce_pairs(self, y: torch.Tensor, handle: Handle, *, weighted: bool = True,
                     blocks: int | None = None) -> torch.Tensor:  # fmt: skip
        """Local (not collective), between a dispatch and its combine: ``[rows, hidden]``, each
        received (sender, token) row's sum of its pairs' rows of ``y`` (``[pairs, hidden]``, in
        ``dispatch``'s order), times their router weights when ``weighted``; fp32 accumulation,
        rounded once. Rows past the received ones (``num_worst_rows``) are undefined. The input
        of ``combine(..., token_rows=True)``, which then moves one row per (token, rank) and
        sends this very tensor (a view of the buffer, valid until the next combine). One
        kernel of ``blocks`` thread blocks (default: one per SM). Not differentiable."""
        return self._mode(False).reduce_pairs(y, handle, weighted, blocks)

    # -- low latency -----------------------------------------------------------------------------
    def low_latency_dispatch(self, x: torch.Tensor, topk_idx: torch.Tensor,
                             topk_weights: torch.Tensor, *, return_recv_hook: bool = False,
                             use_fp8: bool = False) -> LowLatencyDispatched:  # fmt: skip
        """Collective over the team, never synchronises the host. Returns ``x`` of shape
        ``[local experts, world × max_tokens, hidden]`` where ``x[l, :count[l]]`` are local
        expert l's rows (by source rank, then source token and choice; rows past ``count``
        are undefined), ``count`` and ``src`` on the GPU (valid until the next dispatch), the
        handle and, with ``return_recv_hook``, a hook: the call then queues only the send, and
        calling the hook queues the receive (until then ``x`` and ``count`` are not filled).
        An expert index outside [-1, num_experts) stops the kernel with a message naming it
        (a device trap: the CUDA context is lost; with no host synchronisation there is no
        earlier point to raise). ``use_fp8``: the rows travel as e4m3 with a float32 scale per
        128 elements (hidden a multiple of 128); ``x`` is then float8_e4m3fn and ``scales``
        ``[.., hidden / 128]`` holds the scales (``x * scale`` is the token, to e4m3's 3-bit
        mantissa: relative error at most 2^-4 per element, plus scale x 2^-10 near zero)."""
        return self._mode(True).dispatch(x, topk_idx, topk_weights, return_recv_hook, use_fp8)

    def low_latency_combine(self, y: torch.Tensor, handle: LowLatencyHandle, *,
                            return_recv_hook: bool = False):  # fmt: skip
        """Collective over the team, never synchronises the host: ``y`` is the experts' output
        in the dispatch's layout (``[local experts, world × max_tokens, hidden]``; only rows
        below ``count`` are read); returns ``out`` ``[tokens, hidden]``, each token's sum of its
        choices' rows times the dispatch's router weights (fp32 accumulation; each expert rank's
        part rounded once to the dtype before it travels, as in ``combine``), or ``(out, hook)``
        with ``return_recv_hook`` (``out`` is filled by the receive the hook queues)."""
        return self._mode(True).combine(y, handle, return_recv_hook)


__all__ = ["Buffer", "Dispatched", "Handle", "LowLatencyDispatched", "LowLatencyHandle"]
