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

Pipelined: the heads of each rank are cut into ``Problem.chunks`` chunks
(heads_schedule.chunk_count), each with its own pair of mailboxes. Every chunk's inputs are
posted at once, in order, on the per-peer put streams, so chunk c+1 travels while chunk c's
kernel runs and chunk c's output travels back while chunk c+1's runs; only the first chunk's
inputs and the last chunk's outputs are exposed. (One chunk by default: more were slower where
measured, thinner kernels costing more than the overlap gained; docs/attention.md.)

Both directions use the layout the inputs have in memory — head-major ``[batch, heads, seq,
dim]`` or sequence-major ``[batch, seq, heads, dim]`` (``Problem.seq_major``; every rank the
same, checked) — for the gathered tensors too, so every piece is one 2-D copy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gshmem.attention.heads_schedule import head_range, runs
from gshmem.attention.wire import sequence_major

if TYPE_CHECKING:
    import torch

    from gshmem.attention.gather import TeamLike
    from gshmem.attention.ring import Problem

IN, OUT = "heads_in", "heads_out"  # mailbox names: to head-parallel, back to the tokens' owners


def in_layout(t: torch.Tensor, seq_major: bool) -> torch.Tensor:
    """``t`` ``[batch, heads, seq, dim]`` stored sequence-major or head-major as asked (a copy
    only where it is stored otherwise)."""
    return sequence_major(t).transpose(1, 2) if seq_major else t.contiguous()


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


def _post(team: TeamLike, p: Problem, box, sources, targets, to_heads: bool, heads_of) -> None:
    """Posts one all-to-all round through ``box`` and copies this rank's own pieces.
    ``to_heads``: ``sources`` are this rank's shards ``[B, H, L, D]`` and ``targets`` the
    whole-sequence tensors ``[B, h, S, D]`` of a chunk of its heads in its mailbox; else the
    reverse, ``targets`` being the shards' chunk ``[B, W h, L, D]`` in its mailbox.
    ``heads_of(rank, heads)``: the heads of the shard-side tensor that belong to ``rank``.
    One order on every rank (per tensor, batch and run), which NCCL's matching needs."""
    world, me = team.world, team.index
    sends, receives = [], []
    for src, dst in zip(sources, targets, strict=True):
        local = src if to_heads else dst
        length, heads = local.shape[2], local.shape[1]
        for peer in range(world):
            a, z = heads_of(peer if to_heads else me, heads)
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
                receives += _expected(p, dst, length, heads, peer, world, me, to_heads, heads_of)
    box.post(sends, receives)


def _expected(p: Problem, dst, length: int, heads: int, writer: int, world: int, me: int,
              to_heads: bool, heads_of) -> list:  # fmt: skip
    """(writer, view) of every piece ``writer`` sends this rank into ``dst``, in its order."""
    if to_heads:  # the writer's tokens of this rank's heads
        return [(writer, dst.transpose(1, 2)[b, g0 : g0 + n])
                for b in range(dst.shape[0])
                for _, g0, n in runs(length, world, writer, p.layout)]  # fmt: skip
    a, z = heads_of(writer, heads)  # the writer's heads of this rank's tokens
    return [(writer, dst.transpose(1, 2)[b, l0 : l0 + n, a:z])
            for b in range(dst.shape[0])
            for l0, _, n in runs(length, world, me, p.layout)]  # fmt: skip


def _whole_shapes(world: int, chunks: int, *ts: torch.Tensor) -> list[tuple[int, ...]]:
    """The whole-sequence shapes of one chunk of ``ts``' heads."""
    return [(t.shape[0], t.shape[1] // world // chunks, t.shape[2] * world, t.shape[3])
            for t in ts]  # fmt: skip


def _chunk_shapes(world: int, chunks: int, *ts: torch.Tensor) -> list[tuple[int, ...]]:
    """The shard-side shapes of one chunk of ``ts``' heads of every rank."""
    return [(t.shape[0], t.shape[1] // chunks, t.shape[2], t.shape[3]) for t in ts]


def _boxes(team: TeamLike, name: str, chunks: int, q, k) -> list:
    """One mailbox per chunk, each holding one chunk of a q and two k (either direction)."""
    nbytes = (q.numel() + 2 * k.numel()) // chunks * q.element_size()
    return [team.exchange(f"{name}.{c}", nbytes) for c in range(chunks)]


def _place(dst: torch.Tensor, got: torch.Tensor, world: int, chunk: int, chunks: int) -> None:
    """``dst`` ``[B, H, L, D]`` takes chunk ``chunk`` of every rank's heads from ``got``
    ``[B, W h, L, D]`` (rank-major)."""
    parts = dst.unflatten(1, (world, chunks, dst.shape[1] // world // chunks))
    parts[:, :, chunk].copy_(got.unflatten(1, (world, got.shape[1] // world)))


def _to_tokens(team: TeamLike, p: Problem, boxes, c: int, parts, like) -> list[torch.Tensor]:
    """Posts chunk ``c`` of this rank's whole-sequence ``parts`` back to the tokens' owners;
    returns the views of its mailbox that the owners' pieces of chunk ``c`` arrive in."""
    world, box = team.world, boxes[c]
    shapes = _chunk_shapes(world, p.chunks, *like)
    shards = _views(_typed(box, like[0].dtype), shapes, p.seq_major)
    box.fork()
    parts = [in_layout(t, p.seq_major) for t in parts]
    _post(team, p, box, parts, shards, False, lambda r, h: head_range(r, world, h))
    return shards


def _collect(team: TeamLike, p: Problem, boxes, arrived, results) -> None:
    """Waits for every chunk's pieces and places them into ``results``; frees the mailboxes."""
    for c, box in enumerate(boxes):
        box.wait()
        for dst, got in zip(results, arrived[c], strict=True):
            _place(dst, got, team.world, c, p.chunks)
        box.release()


def _to_heads(team: TeamLike, p: Problem, sources, q, k) -> tuple[list, list]:
    """Posts every chunk of ``sources`` (this rank's shards) to the heads' owners; returns the
    mailboxes (sized by ``q`` and ``k``) and, per chunk, the whole-sequence views its pieces
    arrive in."""
    world, chunks = team.world, p.chunks
    boxes = _boxes(team, IN, chunks, q, k)
    shapes = _whole_shapes(world, chunks, *sources)
    wholes = []
    for c, box in enumerate(boxes):
        wholes.append(_views(_typed(box, sources[0].dtype), shapes, p.seq_major))
        box.fork()
        _post(team, p, box, sources, wholes[-1], True,
              lambda r, h, c=c: head_range(r, world, h, c, chunks))  # fmt: skip
    return boxes, wholes


def empty_in_layout(like: torch.Tensor, shape, seq_major: bool) -> torch.Tensor:
    """A new ``[b, h, s, d]`` tensor of ``like``'s dtype and device, stored as ``seq_major``
    says."""
    b, h, s, d = shape
    if seq_major:
        return like.new_empty((b, s, h, d)).transpose(1, 2)
    return like.new_empty((b, h, s, d))


def forward(team: TeamLike, p: Problem, q, k, v) -> tuple[torch.Tensor, ...]:
    """(output in q's dtype, fp32 lse of this rank's heads over the whole sequence, the
    gathered Q/K/V flat, the whole-sequence output of this rank's heads)."""
    world, chunks = team.world, p.chunks
    if world == 1:
        return (
            *p.kernel.forward(q, k, v, p.causal, p.scale),
            q.new_empty(0),
            q.new_empty(0),
        )
    import torch

    q, k, v = (in_layout(t, p.seq_major) for t in (q, k, v))
    ins, wholes = _to_heads(team, p, (q, k, v), q, k)
    outs = _boxes(team, OUT, chunks, q, k)
    b, hq, length, d = q.shape
    h = hq // world
    per_chunk = (q.numel() + 2 * k.numel()) // chunks
    kept = q.new_empty(per_chunk * chunks)
    o_all = empty_in_layout(q, (b, h, length * world, d), p.seq_major)
    lse_all = q.new_empty((b, h, length * world, 1), dtype=torch.float32)
    arrived, outputs = [], []  # outputs: alive until the side copies out of them are joined
    shapes = _whole_shapes(world, chunks, q, k, v)
    for c, box in enumerate(ins):
        box.wait()
        kept_c = _views(kept[c * per_chunk : (c + 1) * per_chunk], shapes, p.seq_major)
        for dst, src in zip(kept_c, wholes[c], strict=True):
            box.copy_out(dst, src)  # off the compute stream, while the kernel reads the same
        o, lse = p.kernel.forward(*wholes[c], p.causal, p.scale)
        box.release()
        arrived.append(_to_tokens(team, p, outs, c, [o], [q]))
        heads = slice(c * h // chunks, (c + 1) * h // chunks)
        outs[c].copy_out(o_all[:, heads], o)
        outputs.append(o)
        lse_all[:, heads].copy_(lse)
    out = empty_in_layout(q, tuple(q.shape), p.seq_major)
    _collect(team, p, outs, arrived, [out])
    for box in ins + outs:
        box.join()
    return out, lse_all, kept, o_all


def backward(team: TeamLike, p: Problem, dout, q, k, v, out, lse, kept, o) -> tuple:
    """(dq, dk, dv) of this rank's shards, given the forward's gathered Q/K/V, whole-sequence
    output and lse of this rank's heads."""
    world, chunks = team.world, p.chunks
    if world == 1:
        return p.kernel.backward(dout, q, k, v, out, lse, p.causal, p.scale)
    dout = in_layout(dout, p.seq_major)
    ins, d_wholes = _to_heads(team, p, (dout,), q, k)
    outs = _boxes(team, OUT, chunks, q, k)
    h = q.shape[1] // world
    per_chunk = (q.numel() + 2 * k.numel()) // chunks
    shapes = _whole_shapes(world, chunks, q, k, v)
    arrived = []
    for c, box in enumerate(ins):
        box.wait()
        wq, wk, wv = _views(kept[c * per_chunk : (c + 1) * per_chunk], shapes, p.seq_major)
        heads = slice(c * h // chunks, (c + 1) * h // chunks)
        grads = p.kernel.backward(d_wholes[c][0], wq, wk, wv, o[:, heads], lse[:, heads],
                                  p.causal, p.scale)  # fmt: skip
        box.release()
        arrived.append(_to_tokens(team, p, outs, c, grads, [q, k, v]))
    grads = [empty_in_layout(t, tuple(t.shape), p.seq_major) for t in (q, k, v)]
    _collect(team, p, outs, arrived, grads)
    for box in ins + outs:
        box.join()
    return tuple(grads)


__all__ = ["backward", "empty_in_layout", "forward", "in_layout", "is_seq_major"]
