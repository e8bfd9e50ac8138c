"""The high-throughput mode of ``gshmem.moe.Buffer`` (training, prefill: thousands of tokens).

A dispatch lays out the routing on the GPU (the layout kernel; routing.plan is its reference),
exchanges every rank's counts (one on-stream all-gather of ``world + num_experts + 1`` int32),
then the dispatch kernel writes each token's row once to every rank that holds one of its
experts, straight into that rank's receive buffer, and each (token, expert) pair into its final
slot there in expert-major order (routing.expert_slots is the reference): the receiver gathers
its rows per expert in one pass and sorts nothing (with ``token_rows`` the caller gets the
receive buffer's rows and each pair's row there instead of that gather). The combine reverses
it: each received row's expert outputs are summed (times the router's weights), and either the
sum goes straight into its sender's combine buffer, in a block of ``max_tokens`` rows per
receiver, and each sender adds up what landed in its own memory (``push``: NVLink stores, which
need no round trip), or it stays in the receiver's symmetric combine buffer and each sender
reads its tokens' sums from every rank it sent them to and adds them up (``pull``: NVLink
loads); ``Buffer(..., combine=...)`` or ``GSHMEM_MOE_COMBINE``, the same on
every rank, else push below 4 ranks and pull from 4 (measured at 4096 tokens on H200: push 518
against pull 604 µs at 2 ranks, pull 964-983 against push 1120 µs at 4; docs/moe.md). With token
rows (``reduce_pairs`` in the caller's experts step, then ``combine(..., token_rows=True)``) the
sums are already where the receiver keeps them, and the combine only signals and pulls. Both
directions move data with SM loads and stores over NVLink from ``blocks`` thread blocks.

Host synchronisation: one per dispatch, after the count exchange: how many rows will arrive (to
size the outputs) and whether any rank's routing held a bad expert index (every rank raises
alike, before anything is sent). With ``num_worst_rows`` (an upper bound on the pairs this rank
receives) none: the outputs have that many rows, padded past the received ones
(kernels.padded_pairs), and a kernel checks the exchanged counts instead (kernels.check: a device
trap). Combines never synchronise.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import torch

from gshmem._errors import UsageError
from gshmem.moe import arrange, kernels, routing
from gshmem.moe.context import FP8_GROUP

if TYPE_CHECKING:
    from gshmem.moe.context import Context

COMBINES = ("pull", "push")
# From this many ranks the default combine pulls (4 x H200, 4096 tokens, DeepSeek-V3 shapes,
# 2026-11-27: pull 964-983 us against push 1120; at 2 ranks push 518 against pull 604 us).
PULL_FROM_WORLD = 4


def combine_mode(world: int, given: str | None = None, env: dict[str, str] | None = None) -> str:
    """How combines bring the sums back on a team of ``world`` ranks: ``given`` (Buffer's
    ``combine=``), else GSHMEM_MOE_COMBINE, else by the team's size: push below PULL_FROM_WORLD
    ranks, pull from there on (each measured faster there)."""
    where = "combine"
    if given is None:
        where = "GSHMEM_MOE_COMBINE"
        default = "pull" if world >= PULL_FROM_WORLD else "push"
        given = (os.environ if env is None else env).get("GSHMEM_MOE_COMBINE", default)
    value = given.strip().lower()
    if value not in COMBINES:
        raise UsageError(f"moe.Buffer: {where}={given!r}; one of {', '.join(COMBINES)}")
    return value


@dataclass
class Handle:
    """One dispatch's routing, what its combine (and the backward passes) reuse."""

    route: kernels.Route
    topk: torch.Tensor  # [tokens, k] int64: the router's choices (sent again by backward passes)
    weights: torch.Tensor  # [tokens, k] float32
    pairs: arrange.Pairs
    rows: int  # rows received
    call: int  # the buffer's dispatch number that made it
    src: tuple[torch.Tensor, torch.Tensor]  # [pairs] int32: sender, token * 8 + choice there
    router_grad: bool  # some rank's topk_weights need a gradient: every rank returns dots


class Dispatched(NamedTuple):
    # [pairs, hidden]: the received tokens, rows per local expert in order; with token_rows:
    # [received rows, hidden], one row per (sender, token), which ``row`` indexes
    x: torch.Tensor
    weights: torch.Tensor  # [pairs] float32: each row's router weight
    # rows of each local expert: a list, or (num_worst_rows given) an int64 tensor on the GPU
    tokens_per_expert: list[int] | torch.Tensor
    src_rank: torch.Tensor  # [pairs] int64: the rank each row came from
    src_token: torch.Tensor  # [pairs] int64: its token index there
    handle: Handle
    scales: torch.Tensor | None = None  # FP8 only: [rows of x, hidden / 128] float32
    row: torch.Tensor | None = None  # token_rows only: [pairs] int64, the row of x of each pair


class HighThroughput:
    """Symmetric receive and combine buffers for ``max_tokens × world`` rows (every rank may send
    this one every token), routing metadata, a float per (token, choice) for the router weights'
    gradient and three completion counters. Collective to create."""

    def __init__(self, ctx: Context, combine: str = "push") -> None:
        comm, rows = ctx.comm, ctx.max_tokens * ctx.world
        self.ctx = ctx
        self.push = combine == "push"  # comb: [world, max_tokens] rows at the senders
        pairs = rows * routing.MAX_TOPK
        self.recv = (  # rows; per (row, choice) its slot; per slot: row, weight, source
            comm.empty((rows, ctx.hidden), ctx.dtype),
            comm.empty((pairs,), torch.int32),
            comm.empty((pairs,), torch.int32),
            comm.empty((pairs,), torch.float32),
            comm.empty((pairs,), torch.int32),
            comm.empty((pairs,), torch.int32),
        )
        self.comb = comm.empty((rows, ctx.hidden), ctx.dtype)
        self.weight_grad = comm.zeros((ctx.max_tokens * routing.MAX_TOPK,), torch.float32)
        counters = comm.zeros((3, ctx.world), torch.int64)  # only ever grow
        self.arrived, self.ready, self.returned = counters[0], counters[1], counters[2]
        self.dispatches = self.combines = self.returns = 0
        self.counts_host = torch.empty(ctx.world * (ctx.world + ctx.num_experts + 2),
                                       dtype=torch.int32, pin_memory=True)  # fmt: skip
        self.finished = torch.zeros(1, dtype=torch.int32, device=ctx.pes.device)  # layout's

    def _expect(self, kind: str) -> None:
        """Calls alternate dispatch-kind, combine-kind: the buffers' reuse is ordered by it."""
        want = "dispatch" if self.dispatches == self.combines else "combine"
        if kind != want:
            raise UsageError(f"moe: a {kind} now would overwrite buffers still in use; calls "
                             f"alternate dispatch, combine (a {want} is due)")  # fmt: skip

    def _send(self, route: kernels.Route, x, topk, weights, fp8: bool = False) -> None:
        kernels.dispatch(route, x, topk, weights, self.ctx.per_rank, self.recv, self.arrived,
                         self.ctx.blocks, fp8)  # fmt: skip
        self.dispatches += 1
        c = self.ctx
        kernels.wait(c.device_bytes, c.pes, self.arrived, self.dispatches * c.blocks)

    def _sum_back(self, h: Handle, y, weight) -> torch.Tensor:
        """Each token's (weighted) sum of its rows of ``y`` back at its sender (a combine)."""
        c = self.ctx
        push = (*h.src, c.max_tokens) if self.push else None
        kernels.reduce(h.route, _rows_of(y), h.pairs.slot, weight, h.rows, self.comb, self.ready,
                       c.blocks, push)  # fmt: skip
        return self._collect(h, self.push)

    def _rows_back(self, h: Handle, y) -> torch.Tensor:
        """Each token's sum of its received rows' ``y`` (``[rows, hidden]``, one row per
        (sender, token)) back at its sender (a combine of token rows). Always pulled, whatever
        the buffer's combine: the rows are already summed, so nothing is left to do where they
        are, and a sender reading them from every rank was measured 2x faster than receivers
        pushing them (4096 tokens, 4 x H100: 509 against 1078 us at 4 ranks, 199 against 397 at
        2; docs/moe.md)."""
        if y.data_ptr() != self.comb.data_ptr():  # else reduce_pairs left the rows there
            self.comb[: h.rows].copy_(y)  # a copy-engine copy: no SMs
        no_slots = torch.empty((0, 1), dtype=torch.int32, device=y.device)
        # the reduce kernel over no rows: its blocks only signal `ready`
        kernels.reduce(h.route, y, no_slots, None, 0, self.comb, self.ready, self.ctx.blocks)
        return self._collect(h, pushed=False)

    def _collect(self, h: Handle, pushed: bool) -> torch.Tensor:
        """The combine's second half: once every rank signalled ``ready``, each token's rows
        summed at its sender, read from every rank's combine buffer or (``pushed``) its own."""
        c = self.ctx
        self.combines += 1
        out = torch.empty((h.route.tokens, c.hidden), dtype=c.dtype, device=self.comb.device)
        target = self.combines * c.blocks
        kernels.pull(h.route, self.comb, out, self.ready, target, c.blocks,
                     c.max_tokens if pushed else 0)  # fmt: skip
        return out

    def _return(self, h: Handle, dots: torch.Tensor) -> torch.Tensor:
        """Each received pair's float back to its sender: ``[tokens, k]`` at this rank (zeros
        where a choice was -1). The destination was zeroed before this backward's send, which
        every writer waited for."""
        kernels.return_values(h.route, dots, *h.src, self.weight_grad, self.returned,
                              self.ctx.blocks)  # fmt: skip
        self.returns += 1
        c = self.ctx
        kernels.wait(c.device_bytes, c.pes, self.returned, self.returns * c.blocks)
        tokens, k = h.topk.shape
        return self.weight_grad[: tokens * routing.MAX_TOPK].view(tokens, -1)[:, :k].clone()

    def dispatch(self, x: torch.Tensor, topk_idx: torch.Tensor, topk_weights: torch.Tensor,
                 use_fp8: bool = False, num_worst_rows: int | None = None,
                 token_rows: bool = False) -> Dispatched:  # fmt: skip
        """Collective over the team: sends each token of ``x`` (``[tokens, hidden]``) to the
        ranks of its ``topk_idx`` experts (``[tokens, k]``, -1: none) and returns what this rank
        received, one row per (token, local expert) pair, rows of expert 0 first (with
        ``token_rows``: the receive buffer's rows, one per (sender, token), and each pair's row
        there). Differentiable in ``x`` (its backward is a combine), except with
        ``token_rows``. Synchronises the host once (the received count), or never with
        ``num_worst_rows`` (outputs padded to it); the next call on this buffer must be
        ``combine``."""
        self._expect("dispatch")
        c = self.ctx
        if token_rows and torch.is_grad_enabled() and x.requires_grad:
            raise UsageError("moe: dispatch(token_rows=True) is not differentiable; dispatch "
                             "without it, or under torch.no_grad()")  # fmt: skip
        x, topk, weights = c.dispatch_args(x, topk_idx, topk_weights, use_fp8)
        if num_worst_rows is not None:
            c.worst_rows_ok(num_worst_rows)
        wants = torch.is_grad_enabled() and topk_weights.requires_grad
        layout = kernels.layout(topk, c.num_experts, c.world, self.finished, int(wants))
        route = kernels.Route(c.device_bytes, c.pes, c.me, c.num_experts, layout)
        route.all_counts = c.comm.all_gather(route.layout.totals, team=c.team)
        if num_worst_rows is None:
            self.counts_host.copy_(route.all_counts.view(-1), non_blocking=True)
            torch.cuda.current_stream().synchronize()  # the one host synchronisation
            all_counts = self.counts_host.view(c.world, -1)
            routing.check_counts(all_counts, c.num_experts)  # every rank raises alike
            router_grad = bool(all_counts[:, -1].any())  # the flag: the same answer on every rank
            self._send(route, x.detach(), topk, weights, use_fp8)
            rows = int(all_counts[:, c.me].sum())
            per_expert = routing.pairs_per_expert(all_counts, c.me, c.world, c.num_experts)
            pairs, src, sources = self._pairs(rows, int(per_expert.sum()), topk.shape[1],
                                              per_expert)  # fmt: skip
            tokens_per_expert: list[int] | torch.Tensor = per_expert.tolist()
        else:
            kernels.check(route, num_worst_rows)  # what the host cannot raise without a sync
            router_grad = wants  # the caller's promise: the same on every rank
            self._send(route, x.detach(), topk, weights, use_fp8)
            rows = min(num_worst_rows, c.max_tokens * c.world)  # rows are at most pairs
            pairs, src, sources = self._padded_pairs(route, rows, num_worst_rows, topk.shape[1])
            tokens_per_expert = pairs.per_expert
        handle = Handle(route, topk, weights, pairs, rows, self.dispatches, src, router_grad)
        got = (pairs.weight, tokens_per_expert, *sources, handle)
        if token_rows:  # the receive buffer itself: no copy into expert order
            values, scales = self._received(rows, use_fp8)
            return Dispatched(values, *got, scales=scales, row=pairs.row)
        if use_fp8:  # not differentiable
            values, scales = self._received(len(self.recv[0]), use_fp8)
            return Dispatched(values.index_select(0, pairs.row), *got,
                              scales=scales.index_select(0, pairs.row))  # fmt: skip
        return Dispatched(_Dispatch.apply(x, self, handle), *got)

    def _received(self, rows: int, fp8: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The first ``rows`` rows of the receive buffer as (values, FP8 scales or None): an
        FP8 row holds its e4m3 values, then its float32 scales."""
        c = self.ctx
        if not fp8:
            return self.recv[0][:rows], None
        raw = self.recv[0][:rows].view(torch.uint8)
        values = raw[:, : c.hidden].view(torch.float8_e4m3fn)
        return values, raw[:, c.hidden : c.hidden + c.hidden // FP8_GROUP * 4].view(torch.float32)

    def _pairs(self, rows: int, n: int, k: int, per_expert: torch.Tensor):
        """The received pairs (``n`` of them, ``rows`` rows), copied out of the receive buffers
        (the next dispatch overwrites them), each pair's (sender, token * 8 + choice) and, for
        the caller, (sender, token) as int64."""
        slot, row, weight, src_rank, src_code = self.recv[1:]
        pairs = arrange.Pairs(row[:n].long(), weight[:n].clone(), per_expert.long(),
                              slot[: rows * k].view(rows, k).clone())  # fmt: skip
        src = (src_rank[:n].clone(), src_code[:n].clone())
        return pairs, src, (src[0].long(), src[1].long() >> 3)

    def _padded_pairs(self, route: kernels.Route, rows: int, worst: int, k: int):
        """``_pairs`` for ``worst`` pairs whatever arrived (those, then padding: row 0, weight
        0, sources -1), the count staying on the GPU (one kernel); the slots of ``rows`` rows (an
        upper bound: the combine's kernel stops at the rows that arrived)."""
        slot, row, weight, src_rank, src_code = self.recv[1:]
        p = kernels.padded_pairs(route, row, weight, src_rank, src_code, worst)
        pairs = arrange.Pairs(p.row, p.weight, p.per_expert,
                              slot[: rows * k].view(rows, k).clone())  # fmt: skip
        return pairs, (p.src_rank, p.src_code), (p.rank, p.token)

    def _latest(self, handle: Handle, what: str) -> None:
        if handle.call != self.dispatches:
            raise UsageError(f"moe: {what} takes the handle of this buffer's latest dispatch")

    def reduce_pairs(self, y: torch.Tensor, handle: Handle, weighted: bool = True,
                     blocks: int | None = None) -> torch.Tensor:  # fmt: skip
        """Local: ``[rows, hidden]``, each received row's sum of its pairs' rows of ``y``
        (``[pairs, hidden]``, dispatch's order), times their router weights when ``weighted``
        (fp32, rounded once); rows past the received ones are undefined. The result is a view
        of the buffer that ``combine(..., token_rows=True)`` sends from, without a copy (valid
        until the next combine-kind call). One kernel of ``blocks`` thread blocks
        (default one per SM: this is the experts' step, not a transfer). Not differentiable."""
        self._latest(handle, "reduce_pairs")
        self._expect("combine")
        _no_grad(y, "reduce_pairs")
        self.ctx.rows_in("y", y, handle.pairs.row.numel())
        h, out = handle, self.comb[: handle.rows]  # where combine(token_rows=True) reads it
        blocks = blocks or torch.cuda.get_device_properties(y.device).multi_processor_count
        kernels.reduce(h.route, _rows_of(y), h.pairs.slot, h.pairs.weight if weighted else None,
                       h.rows, out, None, blocks)  # fmt: skip
        return out

    def combine(self, y: torch.Tensor, handle: Handle, token_rows: bool = False) -> torch.Tensor:
        """Collective over the team: ``out[t]`` = the sum over token t's top-k choices of the
        router weight times that expert's row of ``y`` (``[pairs, hidden]``, in the order
        ``dispatch`` returned), at the rank that sent t. Differentiable in ``y``. With
        ``token_rows``: ``y`` is ``[rows, hidden]``, one row per received (sender, token) (as
        ``reduce_pairs`` gives), and ``out[t]`` the sum of t's rows over the ranks it went to,
        always pulled (every rank passes the same ``token_rows``); not differentiable. No host
        synchronisation; the next call on this buffer must be a dispatch."""
        self._latest(handle, "combine")
        if token_rows:
            _no_grad(y, "combine(token_rows=True)")
            self.ctx.rows_in("y", y, handle.rows)
            self._expect("combine")
            return self._rows_back(handle, y)
        self.ctx.rows_in("y", y, handle.pairs.row.numel())
        return _Combine.apply(y, handle.weights, self, handle)


def _no_grad(y: torch.Tensor, what: str) -> None:
    if torch.is_grad_enabled() and y.requires_grad:
        raise UsageError(f"moe: {what} is not differentiable; call it under torch.no_grad(), "
                         "or combine the pairs' rows (token_rows=False)")  # fmt: skip


def _rows_of(y: torch.Tensor) -> torch.Tensor:
    """``y`` as the kernels read it: rows of contiguous elements, 16-byte aligned."""
    aligned = y.stride(1) == 1 and (y.stride(0) * y.element_size()) % 16 == 0
    return y if aligned and y.data_ptr() % 16 == 0 else y.contiguous()


class _Dispatch(torch.autograd.Function):
    """The received rows per local expert (already in the receive buffer); backward: each
    token's rows' gradients summed back at its rank (a combine without weights)."""

    @staticmethod
    def forward(ctx, x, buf: HighThroughput, handle: Handle):
        ctx.buf, ctx.handle = buf, handle
        return buf.recv[0].index_select(0, handle.pairs.row)

    @staticmethod
    def backward(ctx, grad):
        buf, h = ctx.buf, ctx.handle
        buf._expect("combine")
        return buf._sum_back(h, grad.contiguous(), None), None, None


class _Combine(torch.autograd.Function):
    """Each token's weighted sum of its experts' rows, back at its rank; backward: the output's
    gradient travels like the dispatch, times each row's weight for ``y``; for the router's
    weights, each pair's dot product of that gradient with its row of ``y`` travels back to the
    pair's sender (when any rank's weights need a gradient: the decision rode the count
    exchange, so every rank takes part)."""

    @staticmethod
    def forward(ctx, y, weights, buf: HighThroughput, handle: Handle):
        buf._expect("combine")
        ctx.buf, ctx.handle = buf, handle
        if handle.router_grad:
            ctx.save_for_backward(y)
        return buf._sum_back(handle, y, handle.pairs.weight)

    @staticmethod
    def backward(ctx, grad_out):
        buf, h = ctx.buf, ctx.handle
        buf._expect("dispatch")
        if h.router_grad:
            buf.weight_grad.zero_()  # before the send that every writer waits for
        buf._send(h.route, grad_out.contiguous(), h.topk, h.weights)
        rows = buf.recv[0].index_select(0, h.pairs.row)
        grad_y = (rows.float() * h.pairs.weight[:, None]).to(rows.dtype)
        grad_w = None
        if h.router_grad:
            (y,) = ctx.saved_tensors
            grad_w = buf._return(h, (rows.float() * y.float()).sum(1))
        return grad_y, grad_w if ctx.needs_input_grad[1] else None, None, None


__all__ = ["COMBINES", "PULL_FROM_WORLD", "Dispatched", "Handle", "HighThroughput", "combine_mode"]
