"""The head-parallel schedule's forward and backward (heads_schedule.py says what moves where),
written against mailboxes (exchange.py) and a local kernel (local.py), so that the same loops
run on GPUs over gshmem or NCCL and on the CPU in the tests. Dense tensors only.

Forward: each rank puts, for every peer, its tokens of the peer's heads into the peer's
mailbox at their places in the whole sequence (2-D copy-engine puts straight from q, k, v; its
own heads by a local copy), waits for the others' tokens, and runs one attention call over the
whole sequence for its heads. The gathered Q/K/V are copied out of the mailbox while that call
runs (the backward needs them); the output goes back the same way, each token's rows of every
rank's heads into the token's owner's mailbox, and is copied out.

Backward: the output's gradient goes to the head owners as the inputs did, one backward call
computes the three gradients of each rank's heads over the whole sequence (no partial sums),
and they return to the tokens' owners as the output did.

Both directions use the layout the inputs have in memory — head-major ``[batch, heads, seq,
dim]`` or sequence-major ``[batch, seq, heads, dim]`` (``Problem.seq_major``; every rank the
same, checked) — for the gathered tensors too, so every piece is one 2-D copy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gshmem.attention.heads_schedule import head_range, runs

if TYPE_CHECKING:
    import torch

    from gshmem.attention.gather import TeamLike
    from gshmem.attention.ring import Problem

IN, OUT = "heads_in", "heads_out"  # mailbox names: to head-parallel, back to the tokens' owners


def in_layout(t: torch.Tensor, seq_major: bool) -> torch.Tensor:
    """``t`` ``[batch, heads, seq, dim]`` stored sequence-major or head-major as asked (a copy
    only where it is stored otherwise)."""
    if not seq_major:
        return t.contiguous()
    s = t.transpose(1, 2)
    return t if s.is_contiguous() else s.contiguous().transpose(1, 2)


def is_seq_major(*ts: torch.Tensor) -> bool:
    """Whether every tensor is stored sequence-major (as projections give them)."""
    return all(t.transpose(1, 2).is_contiguous() for t in ts)


def _views(flat: torch.Tensor, shapes, seq_major: bool) -> list[torch.Tensor]:
    """Consecutive ``[batch, heads, seq, dim]`` tensors of ``flat`` (of their dtype), each
    stored as ``seq_major`` says."""
    out, at = [], 0
    for b, h, s, d in shapes:
        n = b * h * s * d
        piece = flat[at : at + n]
        at += n
        out.append(piece.view(b, s, h, d).transpose(1, 2) if seq_major else piece.view(b, h, s, d))
    return out


def _typed(box, dtype) -> torch.Tensor:
    return box.buffer.view(dtype)


def _move(team: TeamLike, p: Problem, box, sources, targets, to_heads: bool) -> None:
    """One all-to-all round through ``box``. ``to_heads``: ``sources`` are this rank's shards
    ``[B, H, L, D]`` and ``targets`` the whole-sequence tensors ``[B, H/W, S, D]`` of its heads
    in its mailbox; else the reverse. Posts the peers' pieces (one order on every rank: per
    tensor, batch and run, which NCCL's matching needs), copies its own, waits for the rest."""
    world, me = team.world, team.index
    sends, receives = [], []
    for src, dst in zip(sources, targets, strict=True):
        local = src if to_heads else dst
        length, heads = local.shape[2], local.shape[1]
        for peer in range(world):
            a, z = head_range(me if not to_heads else peer, world, heads)
            owner = me if to_heads else peer  # whose tokens these runs are
            for b in range(local.shape[0]):
                for l0, g0, n in runs(length, world, owner, p.layout):
                    if to_heads:
                        piece = (dst.transpose(1, 2)[b, g0 : g0 + n],
                                 src.transpose(1, 2)[b, l0 : l0 + n, a:z])  # fmt: skip
                    else:
                        piece = (dst.transpose(1, 2)[b, l0 : l0 + n, a:z],
                                 src.transpose(1, 2)[b, g0 : g0 + n])  # fmt: skip
                    if peer == me:
                        piece[0].copy_(piece[1])
                    else:
                        sends.append((peer, *piece))
            if peer != me:
                receives += _expected(p, dst, length, heads, peer, world, me, to_heads)
    box.post(sends, receives)
    box.wait()


def _expected(p: Problem, dst, length: int, heads: int, writer: int, world: int, me: int,
              to_heads: bool) -> list:  # fmt: skip
    """(writer, view) of every piece ``writer`` sends this rank into ``dst``, in its order."""
    if to_heads:  # the writer's tokens of this rank's heads
        return [(writer, dst.transpose(1, 2)[b, g0 : g0 + n])
                for b in range(dst.shape[0])
                for _, g0, n in runs(length, world, writer, p.layout)]  # fmt: skip
    a, z = head_range(writer, world, heads)  # the writer's heads of this rank's tokens
    return [(writer, dst.transpose(1, 2)[b, l0 : l0 + n, a:z])
            for b in range(dst.shape[0])
            for l0, _, n in runs(length, world, me, p.layout)]  # fmt: skip


def _shapes(world: int, *ts: torch.Tensor) -> list[tuple[int, int, int, int]]:
    """The whole-sequence shapes of ``ts``' heads split over the team."""
    return [(t.shape[0], t.shape[1] // world, t.shape[2] * world, t.shape[3]) for t in ts]


def _nbytes(q, k) -> int:
    """Either mailbox's size: one q and two k of elements (both directions, both passes)."""
    return (q.numel() + 2 * k.numel()) * q.element_size()


def _to_tokens(team: TeamLike, p: Problem, parts, like, nbytes: int) -> list[torch.Tensor]:
    """The whole-sequence ``parts`` of this rank's heads back to the tokens' owners: this
    rank's shards ``[B, H, L, D]`` (shapes of ``like``), every head, freshly allocated."""
    box = team.exchange(OUT, nbytes)
    shards = _views(_typed(box, like[0].dtype), [tuple(t.shape) for t in like], p.seq_major)
    box.fork()
    parts = [in_layout(t, p.seq_major) for t in parts]
    _move(team, p, box, parts, shards, to_heads=False)
    got = [s.clone() for s in shards]
    box.release()
    box.join()
    return got


def forward(team: TeamLike, p: Problem, q, k, v) -> tuple[torch.Tensor, ...]:
    """(output in q's dtype, fp32 lse of this rank's heads over the whole sequence, the
    gathered Q/K/V flat, the whole-sequence output of this rank's heads)."""
    world = team.world
    if world == 1:
        return (*p.kernel.forward(q, k, v, p.causal, p.scale), q.new_empty(0), q.new_empty(0))
    q, k, v = (in_layout(t, p.seq_major) for t in (q, k, v))
    shapes = _shapes(world, q, k, v)
    box = team.exchange(IN, _nbytes(q, k))
    whole = _views(_typed(box, q.dtype), shapes, p.seq_major)
    box.fork()
    _move(team, p, box, (q, k, v), whole, to_heads=True)
    kept = q.new_empty(q.numel() + 2 * k.numel())
    for dst, src in zip(_views(kept, shapes, p.seq_major), whole, strict=True):
        box.copy_out(dst, src)  # off the compute stream, while the kernel reads the same
    o, lse = p.kernel.forward(*whole, p.causal, p.scale)
    box.release()
    box.join()
    (out,) = _to_tokens(team, p, [o], [q], _nbytes(q, k))
    return out, lse, kept, o


def backward(team: TeamLike, p: Problem, dout, q, k, v, out, lse, kept, o) -> tuple:
    """(dq, dk, dv) of this rank's shards, given the forward's gathered Q/K/V, its
    whole-sequence output and lse for this rank's heads."""
    world = team.world
    if world == 1:
        return p.kernel.backward(dout, q, k, v, out, lse, p.causal, p.scale)
    dout = in_layout(dout, p.seq_major)
    shapes = _shapes(world, q, k, v)
    box = team.exchange(IN, _nbytes(q, k))
    (d_whole,) = _views(_typed(box, q.dtype), shapes[:1], p.seq_major)
    box.fork()
    _move(team, p, box, (dout,), (d_whole,), to_heads=True)
    wq, wk, wv = _views(kept, shapes, p.seq_major)
    grads = p.kernel.backward(d_whole, wq, wk, wv, o, lse, p.causal, p.scale)
    box.release()
    box.join()
    return tuple(_to_tokens(team, p, grads, [q, k, v], _nbytes(q, k)))


__all__ = ["backward", "forward", "in_layout", "is_seq_major"]
