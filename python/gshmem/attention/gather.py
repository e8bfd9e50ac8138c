"""The all-gather schedule's forward and backward (gather_schedule.py says what moves where),
written against mailboxes (exchange.py) and a local kernel (local.py), so that the same loops
run on GPUs over gshmem or NCCL and on the CPU in the tests. Dense tensors only.

Forward: pack this rank's K/V sequence-major (a half-shard of every head is then one run of
bytes) and put the runs each reader gathers; meanwhile compute the local shard against itself
(the masked block). Then, once the writers' runs are in, each query part attends to its prefix
of the gathered keys in one unmasked call, merged into the local block's rows by log-sum-exp
(merge.py). The gathered K/V is copied out of the mailbox (off the compute stream) for the
backward, which therefore starts without a transfer.

Backward: the unmasked blocks first, longest first, their key/value gradients summed in fp32
into one sequence-major buffer whose runs go straight back to their owners' receive slots;
the local block's backward runs while they travel. Each owner then adds up the slots that
cover each half of its shard (one reduction per half) and its own block's gradients, rounding
to the inputs' dtype once. dq: the local block's, with each unmasked block's added in place.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from gshmem.attention.gather_schedule import (
    gathered_halves,
    prefix_blocks,
    regions,
    sum_slots,
)
from gshmem.attention.merge import merge
from gshmem.attention.ring import Problem, part
from gshmem.attention.schedule import part_range

if TYPE_CHECKING:
    import torch


class Mailbox(Protocol):
    buffer: torch.Tensor

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


def _seq_major(t: torch.Tensor) -> torch.Tensor:
    """``[batch, heads, seq, dim]`` as a contiguous ``[batch, seq, heads, dim]`` (no copy when
    it already lies that way in memory, as projections give it)."""
    s = t.transpose(1, 2)
    return s if s.is_contiguous() else s.contiguous()


def _runs(p: Problem, world: int, me: int, shape, width: int, slot_of):
    """(sends, receives) of one round, one run per region this rank writes or reads, per
    tensor (k, v) and batch index: sends ``(reader, row, (tensor, batch, source row, rows))``,
    receives ``(writer, row, rows)``, rows counted in tokens (``heads x dim`` elements). A
    mailbox slot holds ``[2, batch, width, heads, dim]``; ``slot_of(region)`` gives (writer,
    reader, source row, slot, row in the slot) of a region."""
    b = shape[0]
    sends: list[tuple] = []
    receives: list[tuple] = []
    for r in regions(world, p.layout, p.causal):
        writer, reader, src_at, slot, dst_at = slot_of(r)
        if me not in (writer, reader):
            continue
        n = part_range(r.part, shape[2])
        n = n[1] - n[0]
        for t in range(2):
            for bi in range(b):
                row = ((slot * 2 + t) * b + bi) * width + dst_at
                if me == writer:
                    sends.append((reader, row, (t, bi, src_at, n)))
                else:
                    receives.append((writer, row, n))
    return sends, receives


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
    seq = (_seq_major(k), _seq_major(v))

    def where(r):  # the forward: owner writes part of its shard to the reader's position
        return r.owner, r.reader, part_range(r.part, length)[0], 0, r.at * half

    sends, receives = _runs(p, world, me, k.shape, width, where)
    box.post(
        [(rd, row * token * k.element_size(), seq[t][bi, a : a + n]) for rd, row, (t, bi, a, n)
         in sends],
        [(w, row * token * k.element_size(), n * token * k.element_size())
         for w, row, n in receives],
    )  # fmt: skip
    out, lse = p.kernel.forward(q, k, v, p.causal, p.scale)  # overlaps the gathering
    box.wait()
    got = box.buffer[: 2 * b * width * token * k.element_size()].view(k.dtype)
    got = got.view(2, b, width, hk, d)
    kept = k.new_empty((2, b, mine, hk, d))
    if mine:
        box.copy_out(kept, got[:, :, :mine])
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
    wire = torch.empty((2, b, mine, hk, d), dtype=torch.float32, device=k.device)
    dqs = []
    for i, (name, n) in enumerate(reversed(prefix_blocks(me, world, p.layout, p.causal))):
        gk, gv = (kv[t, :, : n * half].transpose(1, 2) for t in (0, 1))
        dq_b, *dkv = p.kernel.backward(
            part(dout, name, sd), part(q, name, sd), gk, gv,
            part(out, name, sd), part(lse, name, sd), False, p.scale,
        )  # fmt: skip
        for t, g in enumerate(dkv):  # the longest block covers the whole wire: copied first
            dst = wire[t, :, : n * half]
            if i:
                dst.add_(g.transpose(1, 2))
            else:
                dst.copy_(g.transpose(1, 2))
        dqs.append((name, dq_b))
    box = team.exchange("dkv_scatter", (world - 1) * 2 * b * length * hk * d * 4)

    def where(r):  # the backward: the reader returns the gradients of what it gathered
        slot = r.reader - (r.reader > r.owner)
        return r.reader, r.owner, r.at * half, slot, part_range(r.part, length)[0]

    sends, receives = _runs(p, world, me, k.shape, length, where)
    box.post(
        [(ow, row * hk * d * 4, wire[t, bi, a : a + n]) for ow, row, (t, bi, a, n) in sends],
        [(w, row * hk * d * 4, n * hk * d * 4) for w, row, n in receives],
    )
    dq, dk_own, dv_own = p.kernel.backward(dout, q, k, v, out, lse, p.causal, p.scale)
    for name, dq_b in dqs:
        part(dq, name, sd).add_(dq_b)
    box.wait()
    slots = box.buffer[: (world - 1) * 2 * b * length * hk * d * 4].view(torch.float32)
    slots = slots.view(world - 1, 2, b, length, hk, d)
    acc = torch.empty((2, b, length, hk, d), dtype=torch.float32, device=k.device)
    for h, (lo, hi) in sum_slots(me, world, p.layout, p.causal).items():
        a, z = part_range(h, length)
        if hi > lo:
            torch.sum(slots[lo:hi, :, :, a:z], dim=0, out=acc[:, :, a:z])
        else:
            acc[:, :, a:z].zero_()
    box.release()
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    for t, (own, res) in enumerate(((dk_own, dk), (dv_own, dv))):
        torch.add(own, acc[t].transpose(1, 2), out=res)
    box.join()
    return dq, dk, dv


__all__ = ["Mailbox", "TeamLike", "backward", "forward"]
