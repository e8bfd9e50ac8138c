"""The all-gather schedule's forward and backward (gather_schedule.py says what moves where),
written against mailboxes (exchange.py) and a local kernel (local.py), so that the same loops
run on GPUs over gshmem or NCCL and on the CPU in the tests. Dense tensors only.

Forward: pack this rank's K/V sequence-major (a half-shard of every head is then one run of
bytes) and put the runs each reader gathers; meanwhile compute the local shard against itself
(the masked block). Then, once the writers' runs are in, each query part attends to its prefix
of the gathered keys in one unmasked call, merged into the local block's rows by log-sum-exp
(merge.py). The gathered K/V is copied out of the mailbox (off the compute stream) for the
backward, which therefore starts without a transfer.

Backward: the unmasked blocks first, longest first; each block's key/value gradients go
straight from the kernel's output back to their owners, one receive slot per (block, part
read), while the local block's backward runs. Each owner then adds its own block's gradients
and, in fp32, the slots that cover each half of its shard (slot_sum.py), rounding to the
inputs' dtype once: each block's gradient is rounded by the kernel and the sum once, as in
the ring. dq: the local block's, with each unmasked block's added in place.

Both passes queue the local block on the compute stream *before* the host issues the
transfers, which then wait only for what came before the block (``fork``): issuing a dozen
puts and flags takes the host a few hundred microseconds, which would otherwise leave the GPU
idle at the start of the call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from gshmem.attention.gather_schedule import (
    contributions,
    gathered_halves,
    max_slots,
    prefix_blocks,
    regions,
    sum_slots,
)
from gshmem.attention.merge import merge
from gshmem.attention.ring import Problem, part
from gshmem.attention.schedule import BACK, FRONT, part_range
from gshmem.attention.slot_sum import own_plus_slots
from gshmem.attention.wire import sequence_major

if TYPE_CHECKING:
    import torch


class Mailbox(Protocol):
    buffer: torch.Tensor

    def fork(self) -> None: ...
    def post(self, sends, receives) -> None: ...
    def wait(self) -> None: ...
    def copy_out(self, dst: torch.Tensor, src: torch.Tensor) -> None: ...
    def release(self) -> None: ...
    def join(self) -> None: ...


class TeamLike(Protocol):
    world: int
    index: int

    def exchange(self, name: str, nbytes: int) -> Mailbox:
        """The mailbox ``name`` of at least ``nbytes`` (collective the first time)."""
        ...


def _post(box: Mailbox, me: int, transfers, sources, dtype, token: int) -> None:
    """Posts this rank's part of a round. ``transfers``: (writer, reader, source, row, rows)
    in one order on every rank (NCCL matches a pair's runs by order), ``source`` (tensor
    index, batch, first row) into ``sources``, ``row`` the destination row in the reader's
    mailbox; rows are ``token`` elements of ``dtype``."""
    size = token * dtype.itemsize
    sends, receives = [], []
    for writer, reader, (t, bi, a), row, n in transfers:
        dst = box.buffer[row * size : (row + n) * size]
        if writer == me:
            sends.append((reader, dst, sources[t][bi, a : a + n]))
        elif reader == me:
            receives.append((writer, dst))
    box.post(sends, receives)


def forward(team: TeamLike, p: Problem, q, k, v) -> tuple[torch.Tensor, ...]:
    """(output in q's dtype, fp32 lse, the gathered K/V flat) of this rank's queries against
    the whole sequence."""
    world, me, sd = team.world, team.index, p.kernel.seq_dim
    if world == 1:
        return (*p.kernel.forward(q, k, v, p.causal, p.scale), k.new_empty(0))
    b, hk, length, d = k.shape
    half, token = length // 2, hk * d
    width = 2 * (world - 1) * half  # tokens per (tensor, batch) in a mailbox
    mine = gathered_halves(me, world, p.layout, p.causal) * half
    box = team.exchange("kv_gather", 2 * b * width * token * k.element_size())
    seq = (sequence_major(k), sequence_major(v))
    box.fork()
    out, lse = p.kernel.forward(q, k, v, p.causal, p.scale)  # queued first; overlaps the puts
    transfers = [
        (r.owner, r.reader, (t, bi, a), (t * b + bi) * width + r.at * half, z - a)
        for r in regions(world, p.layout, p.causal)
        for a, z in [part_range(r.part, length)]
        for t in range(2)
        for bi in range(b)
    ]
    _post(box, me, transfers, seq, k.dtype, token)
    box.wait()
    got = box.buffer[: 2 * b * width * token * k.element_size()].view(k.dtype)
    got = got.view(2, b, width, hk, d)
    kept = k.new_empty((2, b, mine, hk, d))
    for t in range(2) if mine else ():
        for bi in range(b):  # contiguous runs: copy-engine copies, no SMs
            box.copy_out(kept[t, bi], got[t, bi, :mine])
    for name, n in prefix_blocks(me, world, p.layout, p.causal):
        gk, gv = (got[t, :, : n * half].transpose(1, 2) for t in (0, 1))
        o, lse_b = p.kernel.forward(part(q, name, sd), gk, gv, False, p.scale)
        rows, lse_rows = part(out, name, sd), part(lse, name, sd)
        merge(rows, lse_rows, o, lse_b, rows, lse_rows)
    box.release()
    box.join()
    return out, lse, kept.view(-1)


def backward(team: TeamLike, p: Problem, dout, q, k, v, out, lse, kept) -> tuple:
    """(dq, dk, dv) of this rank's shards, given the forward's output, lse and gathered K/V."""
    import torch

    world, me, sd = team.world, team.index, p.kernel.seq_dim
    if world == 1:
        return p.kernel.backward(dout, q, k, v, out, lse, p.causal, p.scale)
    b, hk, length, d = k.shape
    half = length // 2
    mine = gathered_halves(me, world, p.layout, p.causal) * half
    kv = kept.view(2, b, mine, hk, d)
    grads: dict[int, tuple] = {}  # block length -> its dK, dV (sequence-major)
    dqs = []
    for name, n in reversed(prefix_blocks(me, world, p.layout, p.causal)):
        gk, gv = (kv[t, :, : n * half].transpose(1, 2) for t in (0, 1))
        dq_b, dk_b, dv_b = p.kernel.backward(
            part(dout, name, sd), part(q, name, sd), gk, gv,
            part(out, name, sd), part(lse, name, sd), False, p.scale,
        )  # fmt: skip
        grads[n] = (sequence_major(dk_b), sequence_major(dv_b))
        dqs.append((name, dq_b))
    slots = max_slots(world, p.layout, p.causal)
    box = team.exchange("dkv_scatter", slots * 2 * b * length * hk * d * k.element_size())
    box.fork()
    dq, dk_own, dv_own = p.kernel.backward(dout, q, k, v, out, lse, p.causal, p.scale)
    at = {(r.owner, r.reader): r.at for r in regions(world, p.layout, p.causal)}
    transfers, sources = [], []
    for owner in range(world):
        for slot, (writer, n, name) in enumerate(contributions(owner, world, p.layout, p.causal)):
            a, z = part_range(name, length)
            src = at[owner, writer] * half
            for t in range(2):
                if writer == me:
                    sources.append(grads[n][t])
                for bi in range(b):
                    row = ((slot * 2 + t) * b + bi) * length + a
                    idx = len(sources) - 1 if writer == me else 0
                    transfers.append((writer, owner, (idx, bi, src), row, z - a))
    _post(box, me, transfers, sources, k.dtype, hk * d)
    for name, dq_b in dqs:
        part(dq, name, sd).add_(dq_b)
    box.wait()
    got = box.buffer[: slots * 2 * b * length * hk * d * k.element_size()].view(k.dtype)
    got = got.view(slots, 2, b, length, hk, d)
    runs = sum_slots(me, world, p.layout, p.causal)  # each half's slots: a run from slot 0
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    for t, (own, res) in enumerate(((dk_own, dk), (dv_own, dv))):
        own_plus_slots(own, got[:, t], runs[FRONT][1], runs[BACK][1], res)
    box.release()
    box.join()
    return dq, dk, dv


__all__ = ["Mailbox", "TeamLike", "backward", "forward"]
