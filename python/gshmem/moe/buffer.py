"""``gshmem.moe.Buffer``: expert-parallel dispatch and combine over a team's symmetric memory.

A dispatch plans the routing on the GPU (routing.py), exchanges every rank's counts (one
on-stream all-gather of ``world + num_experts`` int32), then the dispatch kernel writes each
token's row once to every rank that holds one of its experts, straight into that rank's receive
buffer. The receiver sorts what it got into rows per local expert (arrange.py). The combine
reverses it: each received row's expert outputs are summed (times the router's weights) into the
receiver's symmetric combine buffer, and each sender reads its tokens' sums from every rank it
sent them to and adds them up. Both directions move data with SM loads and stores over NVLink
from ``blocks`` thread blocks (default 24).

Host synchronisation: one per dispatch, after the count exchange: how many rows will arrive (to
size the outputs) and whether any rank's routing held a bad expert index (every rank raises
alike, before anything is sent). Combines never synchronise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import torch

from gshmem._errors import UsageError
from gshmem.moe import arrange, kernels, routing

if TYPE_CHECKING:
    from gshmem.comm import Comm
    from gshmem.team import Team

DTYPES = (torch.bfloat16, torch.float16)
MAX_WORLD = 32  # one warp's lanes, one per rank, in the combine kernel


@dataclass
class Handle:
    """One dispatch's routing, what its combine (and the backward passes) reuse."""

    route: kernels.Route
    topk: torch.Tensor  # [tokens, k] int64: the router's choices (sent again by backward passes)
    weights: torch.Tensor  # [tokens, k] float32
    pairs: arrange.Pairs
    rows: int  # rows received
    call: int  # the buffer's dispatch number that made it


class Dispatched(NamedTuple):
    x: torch.Tensor  # [pairs, hidden]: the received tokens, rows per local expert in order
    weights: torch.Tensor  # [pairs] float32: each row's router weight
    tokens_per_expert: list[int]  # rows of each local expert
    src_rank: torch.Tensor  # [pairs] int64: the rank each row came from
    src_token: torch.Tensor  # [pairs] int64: its token index there
    handle: Handle


class Buffer:
    """Symmetric receive and combine buffers for tokens of ``hidden`` elements of ``dtype``, at
    most ``max_tokens`` per rank per dispatch, routed to ``num_experts`` experts spread evenly
    over ``team`` (default: every PE of ``comm``). Collective to create (allocates symmetric
    memory: about ``2 * max_tokens * world * hidden`` elements); every team member must be
    load/store-reachable (one host)."""

    def __init__(
        self,
        comm: Comm,
        hidden: int,
        max_tokens: int,
        num_experts: int,
        *,
        dtype: torch.dtype = torch.bfloat16,
        team: Team | None = None,
        blocks: int = 24,
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
        base = comm.heap_info()["heap_base"]
        if any(comm.ptr(base, pe) is None for pe in team.members()):
            raise UsageError("moe.Buffer: every rank of the team must be load/store-reachable "
                             "(one host, P2P on)")  # fmt: skip
        self.comm, self.team, self.world, self.me = comm, team, world, team.rank
        self.hidden, self.max_tokens, self.num_experts, self.dtype = (
            hidden, max_tokens, num_experts, dtype)  # fmt: skip
        self.per_rank, self.blocks = num_experts // world, int(blocks)
        rows = max_tokens * world  # every rank may send me every token
        self.recv = (
            comm.empty((rows, hidden), dtype),
            comm.empty((rows,), torch.int32),
            comm.empty((rows * routing.MAX_TOPK,), torch.int32),
            comm.empty((rows * routing.MAX_TOPK,), torch.float32),
        )
        self.comb = comm.empty((rows, hidden), dtype)
        counters = comm.zeros((2, world), torch.int64)  # arrived, ready: only ever grow
        self.arrived, self.ready = counters[0], counters[1]
        self.pes = torch.tensor(team.members(), dtype=torch.int32, device=f"cuda:{comm.device}")
        self.device_bytes = bytes(comm.device_handle())
        self.dispatches = self.combines = 0
        self.counts_host = torch.empty(world * (world + num_experts + 1), dtype=torch.int32,
                                       pin_memory=True)  # fmt: skip
        torch.cuda.synchronize(comm.device)
        comm.barrier()

    # -- checks -------------------------------------------------------------------------------
    def _rows_in(self, name: str, t: torch.Tensor, rows: int | None) -> None:
        if t.dim() != 2 or t.shape[1] != self.hidden or (rows is not None and t.shape[0] != rows):
            want = f"[{'tokens' if rows is None else rows}, {self.hidden}]"
            raise UsageError(f"moe: {name} must be {want}, got {tuple(t.shape)}")
        if t.dtype != self.dtype:
            raise UsageError(f"moe: {name} is {t.dtype}; this buffer moves {self.dtype}")
        if t.device != torch.device("cuda", self.comm.device):
            raise UsageError(f"moe: {name} is on {t.device}; the comm's GPU is "
                             f"cuda:{self.comm.device}")  # fmt: skip

    def _expect(self, kind: str) -> None:
        """Calls alternate dispatch-kind, combine-kind: the buffers' reuse is ordered by it."""
        want = "dispatch" if self.dispatches == self.combines else "combine"
        if kind != want:
            raise UsageError(f"moe: a {kind} now would overwrite buffers still in use; calls "
                             f"alternate dispatch, combine (a {want} is due)")  # fmt: skip

    # -- the two directions ---------------------------------------------------------------------
    def _send(self, route: kernels.Route, x, topk, weights) -> None:
        kernels.dispatch(route, x, topk, weights, self.per_rank, self.recv, self.arrived,
                         self.blocks)  # fmt: skip
        self.dispatches += 1
        kernels.wait(self.arrived, self.dispatches * self.blocks)

    def _sum_back(self, route: kernels.Route, y, slot, weight, rows: int) -> torch.Tensor:
        kernels.reduce(route, y, slot, weight, rows, self.comb, self.ready, self.blocks)
        self.combines += 1
        out = torch.empty((route.tokens, self.hidden), dtype=self.dtype, device=y.device)
        kernels.pull(route, self.comb, out, self.ready, self.combines * self.blocks, self.blocks)
        return out

    def dispatch(self, x: torch.Tensor, topk_idx: torch.Tensor, topk_weights: torch.Tensor
                 ) -> Dispatched:  # fmt: skip
        """Collective over the team: sends each token of ``x`` (``[tokens, hidden]``) to the
        ranks of its ``topk_idx`` experts (``[tokens, k]``, -1: none) and returns what this rank
        received, one row per (token, local expert) pair, rows of expert 0 first. Differentiable
        in ``x`` (its backward is a combine). Synchronises the host once (the received count);
        the next call on this buffer must be ``combine``."""
        self._expect("dispatch")
        self._rows_in("x", x, None)
        if x.shape[0] > self.max_tokens:
            raise UsageError(f"moe: {x.shape[0]} tokens exceed the buffer's {self.max_tokens}")
        routing.check(topk_idx, topk_weights, self.num_experts, self.world)
        if topk_idx.shape[0] != x.shape[0]:
            raise UsageError("moe: topk_idx must have one row per token of x")
        x, topk, weights = x.contiguous(), topk_idx.long().contiguous(), topk_weights.contiguous()
        plan = routing.plan(topk, self.num_experts, self.world)
        counts = self.comm.all_gather(plan.counts, team=self.team)
        self.counts_host.copy_(counts.view(-1), non_blocking=True)
        copied = torch.cuda.Event()
        copied.record()
        offsets = routing.offsets(counts, self.me, self.world)
        route = kernels.Route(self.device_bytes, self.pes, self.me, plan.position, offsets)
        copied.synchronize()  # the one host synchronisation: how many rows will arrive
        all_counts = self.counts_host.view(self.world, -1)
        routing.check_counts(all_counts, self.num_experts)  # every rank raises alike
        self._send(route, x.detach(), topk, weights)
        start = routing.received(all_counts, self.me, self.world)
        per_expert = routing.pairs_per_expert(all_counts, self.me, self.world, self.num_experts)
        rows, k = int(start[-1]), topk.shape[1]
        local, recv_weights = (t[: rows * k].view(rows, k) for t in self.recv[2:])
        pairs = arrange.pairs(local, recv_weights, self.per_rank, int(per_expert.sum()))
        handle = Handle(route, topk, weights, pairs, rows, self.dispatches)
        src_rank = torch.searchsorted(start[1:].to(x.device), pairs.row, right=True)
        src_token = self.recv[1].index_select(0, pairs.row).long()
        recv_x = _Dispatch.apply(x, self, handle)
        return Dispatched(recv_x, pairs.weight, per_expert.tolist(), src_rank, src_token, handle)

    def combine(self, y: torch.Tensor, handle: Handle) -> torch.Tensor:
        """Collective over the team: ``out[t]`` = the sum over token t's top-k choices of the
        router weight times that expert's row of ``y`` (``[pairs, hidden]``, in the order
        ``dispatch`` returned), at the rank that sent t. Differentiable in ``y``. No host
        synchronisation; the next call on this buffer must be a dispatch."""
        if handle.call != self.dispatches:
            raise UsageError("moe: combine takes the handle of this buffer's latest dispatch")
        self._rows_in("y", y, handle.pairs.row.numel())
        return _Combine.apply(y, self, handle)


class _Dispatch(torch.autograd.Function):
    """The received rows per local expert (already in the receive buffer); backward: each
    token's rows' gradients summed back at its rank (a combine without weights)."""

    @staticmethod
    def forward(ctx, x, buf: Buffer, handle: Handle):
        ctx.buf, ctx.handle = buf, handle
        return buf.recv[0].index_select(0, handle.pairs.row)

    @staticmethod
    def backward(ctx, grad):
        buf, h = ctx.buf, ctx.handle
        buf._expect("combine")
        return buf._sum_back(h.route, grad.contiguous(), h.pairs.slot, None, h.rows), None, None


class _Combine(torch.autograd.Function):
    """Each token's weighted sum of its experts' rows, back at its rank; backward: the output's
    gradient travels like the dispatch, times each row's weight."""

    @staticmethod
    def forward(ctx, y, buf: Buffer, handle: Handle):
        buf._expect("combine")
        ctx.buf, ctx.handle = buf, handle
        return buf._sum_back(handle.route, y, handle.pairs.slot, handle.pairs.weight,
                             handle.rows)  # fmt: skip

    @staticmethod
    def backward(ctx, grad_out):
        buf, h = ctx.buf, ctx.handle
        buf._expect("dispatch")
        buf._send(h.route, grad_out.contiguous(), h.topk, h.weights)
        rows = buf.recv[0].index_select(0, h.pairs.row)
        return (rows.float() * h.pairs.weight[:, None]).to(rows.dtype), None, None


__all__ = ["Buffer", "Dispatched", "Handle"]
