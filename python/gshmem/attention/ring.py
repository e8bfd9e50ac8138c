"""Ring attention's forward and backward loops (Liu et al., "Ring Attention"; the zigzag
balance of Brandon et al. / ring-flash-attn), written against a ring of channels (transport.py)
and a local kernel (local.py), so the same loops run on GPUs over gshmem or NCCL and on the CPU
in the tests.

Forward, at step s: wait for the K/V shard of step s, pass it on to the right neighbour (the
copy overlaps this step's attention), compute this step's blocks (schedule.py) and fold them into
fp32 accumulators by their log-sum-exp (merge.py), then release the slot.

Backward runs the steps in reverse, so that each rank's own shard comes last: at step t a rank
holds the shard that started on rank ``r + 1 + t`` (the forward's schedule at step W - 1 - t), and
shards move to the *left* neighbour. Step 0's shard is the one the forward received last, kept
by the forward (``last``), so the backward starts without waiting; the last step's shard is the
rank's own, so K/V travel W - 2 hops, none at W = 2. The key/value gradients of each shard
travel with it, one step behind, in fp32 (``DKV_WIRE_DTYPE``; docs/attention.md gives the error
and traffic that chose it): at step t a rank computes its blocks' gradients first and only then
waits for the shard's running dK/dV from the right, adds its share and passes them on. A
shard's sums reach its owner at the owner's last step, where its own blocks finish them: no hop
of finished sums is left after the last attention, and every rank ends on the same causal block.

Tensors here are in the kernel's layout (``kernel.seq_dim`` is the sequence dimension); ``lse``
is aligned with the output (head dimension of size 1), fp32.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from gshmem.attention.merge import merge
from gshmem.attention.schedule import ALL, blocks_per_half, halves, part_range, step_blocks

if TYPE_CHECKING:
    from collections.abc import Sequence

    import torch

    from gshmem.attention.local import Dense, Varlen


class Channel(Protocol):
    def wait(self, i: int) -> None: ...
    def message(self, i: int, shapes, dtype) -> tuple[torch.Tensor, list[torch.Tensor]]: ...
    def send(self, parts: Sequence[torch.Tensor], i: int) -> None: ...
    def release(self, i: int) -> None: ...
    def join(self) -> None: ...


class RingLike(Protocol):
    world: int
    index: int

    def channel(self, name: str, nbytes: int, reverse: bool = False) -> Channel:
        """The channel ``name`` with slots of at least ``nbytes``: to the right neighbour, or
        to the left one when ``reverse``."""
        ...


@dataclass(frozen=True)
class Problem:
    """What every rank computes: the mask, the scale, the layout and the local kernel."""

    causal: bool
    scale: float
    layout: str
    kernel: Dense | Varlen
    split: bool = False  # blocks of halves only (packed documents)
    gather: bool = False  # the all-gather schedule (gather.py) instead of the ring
    heads: bool = False  # the head-parallel schedule (heads.py) instead of the ring
    seq_major: bool = False  # heads: the tensors are stored [batch, seq, heads, dim]
    chunks: int = 1  # heads: the chunks of heads each pass moves and computes in turn


DKV_WIRE_DTYPE = "float32"  # dK/dV partial sums on the wire (docs/attention.md: why)


def _wire():
    import torch

    return getattr(torch, DKV_WIRE_DTYPE)


def part(x: torch.Tensor, name: str, seq_dim: int) -> torch.Tensor:
    a, b = part_range(name, x.shape[seq_dim])
    return x if name == ALL else x.narrow(seq_dim, a, b - a)


class Rows:
    """One rank's query rows, filled block by block with either log-sum-exp merges (the forward's
    outputs) or sums (the backward's dq). Each half keeps its newest partial: the first block's
    result as it came (no copy when it covers every row; a block covering every row after one
    that covered a half becomes the output, the half combined into it), then one combine per
    later block,
    written in fp32 while more blocks will reach those rows and in the final dtype by the last
    one, so each element is rounded to 16 bits once more than the kernel rounds it."""

    def __init__(self, q: torch.Tensor, seq_dim: int, blocks: dict[str, int], merge: bool):
        self.like, self.seq_dim, self.left, self.merging = q, seq_dim, dict(blocks), merge
        self.out = self.lse = self.acc = None
        self.prev: tuple = (None, None)  # an output replaced by a block's (its rows, lse)
        self.where: dict[str, str] = {}  # half -> "out", "acc" or "prev": where its partial is

    def _rows(self, which: str, name: str):
        """(rows of part ``name`` in the output, the fp32 accumulator or the replaced output,
        their lse or None)."""
        rows, lse = {"out": (self.out, self.lse), "acc": (self.acc, self.lse), "prev": self.prev}[
            which
        ]
        return part(rows, name, self.seq_dim), part(
            lse, name, self.seq_dim
        ) if self.merging else None

    def add(self, name: str, out: torch.Tensor, lse: torch.Tensor | None = None) -> None:
        hs = halves(name)
        for h in hs:
            self.left[h] -= 1
        fresh = tuple(h for h in hs if h not in self.where)  # the first block of these rows
        seen = tuple(h for h in hs if h in self.where)
        if fresh and seen and all(self.where[h] == "out" for h in seen):
            # the block covers every row: its tensor becomes the output (no copy of its fresh
            # rows) and the older partial of the other rows combines into it
            self.prev, (self.out, self.lse) = (self.out, self.lse), (out, lse)
            self.where.update({h: "prev" for h in seen} | {h: "out" for h in fresh})
            self._combine(name, seen, out, lse)
            self.prev = (None, None)
            return
        if fresh:
            self._first(name, fresh, out, lse)
        if seen:
            self._combine(name, seen, out, lse)

    def _first(self, name: str, hs: tuple[str, ...], out, lse) -> None:
        import torch

        if self.out is None and len(hs) == 2:
            self.out, self.lse = out, lse
        else:
            if self.out is None:
                self.out = torch.empty_like(self.like)
                if self.merging:
                    self.lse = torch.empty((*self.like.shape[:-1], 1), dtype=torch.float32,
                                           device=self.like.device)  # fmt: skip
            sub = ALL if len(hs) == 2 else hs[0]
            rows, lse_rows = self._rows("out", sub)
            rows.copy_(out if sub == name else part(out, sub, self.seq_dim))
            if self.merging:
                lse_rows.copy_(lse if sub == name else part(lse, sub, self.seq_dim))
        self.where.update({h: "out" for h in hs})

    def _combine(self, name: str, hs: tuple[str, ...], out, lse) -> None:
        import torch

        # one combine per half when the halves' partials or destinations differ
        groups = [hs] if len({(self.where[h], self.left[h] == 0) for h in hs}) == 1 else [
            (h,) for h in hs]  # fmt: skip
        for g in groups:
            sub = ALL if len(g) == 2 else g[0]
            src = self.where[g[0]]
            dst = "out" if self.left[g[0]] == 0 else "acc"
            if dst == "acc" and self.acc is None:
                self.acc = torch.empty(self.like.shape, dtype=torch.float32,
                                       device=self.like.device)  # fmt: skip
            a, lse_a = self._rows(src, sub)
            o, lse_o = self._rows(dst, sub)
            b = out if sub == name else part(out, sub, self.seq_dim)  # a half of an ALL block
            if self.merging:
                lse_b = lse if sub == name else part(lse, sub, self.seq_dim)
                merge(a, lse_a, b, lse_b, o, lse_o)
            else:
                torch.add(a, b, out=o)
            self.where.update({h: dst for h in g})

    def result(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert set(self.where.values()) == {"out"} and not any(self.left.values())
        return self.out, self.lse


def _split(flat: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Views of k's and v's shapes over a flat message holding k then v."""
    return flat[: k.numel()].view(k.shape), flat[k.numel() :].view(v.shape)


def _packed(k: torch.Tensor, v: torch.Tensor, dtype: Any) -> tuple[torch.Tensor, ...]:
    """(flat buffer, k view, v view): k and v one after the other in one contiguous message."""
    import torch

    buf = torch.empty(k.numel() + v.numel(), dtype=dtype, device=k.device)
    return buf, *_split(buf, k, v)


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def forward(ring: RingLike, p: Problem, q, k, v) -> tuple[torch.Tensor, ...]:
    """(output in q's dtype, fp32 lse, last) of this rank's queries against the whole sequence;
    ``last`` is the K/V shard the ring brought last (k then v, flat; empty when W = 1), which the
    backward starts from."""
    world, me, sd = ring.world, ring.index, p.kernel.seq_dim
    rows = Rows(q, sd, blocks_per_half(me, world, p.layout, p.causal, p.split), merge=True)
    msg = kc, vc = k.contiguous(), v.contiguous()  # the first message: put part by part
    ch = ring.channel("kv", _nbytes(kc) + _nbytes(vc)) if world > 1 else None
    last = k.new_empty(0)
    for s in range(world):
        if s > 0:
            ch.wait(s % 2)
            flat, (kc, vc) = ch.message(s % 2, (k.shape, v.shape), k.dtype)
            msg = (flat,)
        if s < world - 1:
            ch.send(msg, (s + 1) % 2)
        elif s > 0:
            last = flat.view(k.dtype).clone()  # the slot is refilled by the next call
        for b in step_blocks(me, world, s, p.layout, p.causal, p.split):
            o, lse = p.kernel.forward(
                part(q, b.q, sd), part(kc, b.kv, sd), part(vc, b.kv, sd), b.causal, p.scale
            )
            rows.add(b.q, o, lse)
        if s > 0:
            ch.release(s % 2)
    if ch is not None:
        ch.join()
    return (*rows.result(), last)


def _fold(grads, acc, out, sd: int) -> None:
    """``out`` (dK, dV) = ``acc`` (the running sums, or None: zeros) + the step's block gradients
    ``grads`` ((kv part, dk, dv), ...), in one pass per part where it can: a part's first block
    adds ``acc`` into ``out`` (or is copied when there is no ``acc``), later blocks add in place;
    parts no block touches are copied across (or zeroed). ``out`` may be ``acc`` (in place)."""
    import torch

    done: set[str] = set()  # halves of ``out`` written
    for name, *gs in grads:
        hs = halves(name)
        subs = [name] if len({h in done for h in hs}) == 1 else list(hs)
        for sub in subs:
            fresh = sub not in done and not (set(halves(sub)) & done)
            for i, g in enumerate(gs):
                o = part(out[i], sub, sd)
                g = g if sub == name else part(g, sub, sd)
                if not fresh:
                    o.add_(g)
                elif acc is None:
                    o.copy_(g)
                else:
                    torch.add(part(acc[i], sub, sd), g, out=o)
            done.update(halves(sub))
    for h in halves(ALL):
        if h in done:
            continue
        for i, o in enumerate(out):
            if acc is None:
                part(o, h, sd).zero_()
            elif acc[i] is not o:
                part(o, h, sd).copy_(part(acc[i], h, sd))


def backward(ring: RingLike, p: Problem, dout, q, k, v, out, lse, last) -> tuple[torch.Tensor, ...]:
    """(dq, dk, dv) of this rank's shards, given the forward's output, lse and last shard."""
    import torch

    world, me, sd = ring.world, ring.index, p.kernel.seq_dim
    dq = Rows(q, sd, blocks_per_half(me, world, p.layout, p.causal, p.split), merge=False)
    shapes = (k.shape, v.shape)
    kv_ch = ring.channel("kv_back", _nbytes(k) + _nbytes(v), reverse=True) if world > 2 else None
    dkv_bytes = (k.numel() + v.numel()) * _wire().itemsize
    dkv_ch = ring.channel("dkv", dkv_bytes, reverse=True) if world > 1 else None
    held = last  # the shard of this step, flat (the forward's last one first)
    acc = None  # the running dK/dV of the shard held: none at the first step
    for t in range(world):
        s = world - 1 - t  # the forward's step with the same shard
        if s == 0:
            kc, vc = k, v  # this rank's own shard, last
        else:
            if t > 0:
                kv_ch.wait(t % 2)
                held, (kc, vc) = kv_ch.message(t % 2, shapes, k.dtype)
            else:
                kc, vc = _split(held, k, v)
            if s > 1:  # the left neighbour's next shard (its last one is its own)
                kv_ch.send((held,), (t + 1) % 2)
        blocks, grads = step_blocks(me, world, s, p.layout, p.causal, p.split), []
        for b in blocks:
            dq_b, dk_b, dv_b = p.kernel.backward(
                *(part(x, b.q, sd) for x in (dout, q)),
                part(kc, b.kv, sd),
                part(vc, b.kv, sd),
                *(part(x, b.q, sd) for x in (out, lse)),
                b.causal,
                p.scale,
            )
            grads.append((b.kv, dq_b, dk_b, dv_b))
        if t > 0:  # only now: the blocks above never wait for the right neighbour's dK/dV
            dkv_ch.wait(t % 2)
            dflat, acc = dkv_ch.message(t % 2, shapes, _wire())
        if s == 0:  # finished: this rank's own gradients, in the inputs' dtype (two tensors:
            # the custom op's outputs must not alias one another)
            dkv = (torch.empty_like(k), torch.empty_like(v))
        elif acc is not None:
            dkv = acc  # in place, in the slot the sums arrived in
        else:
            dflat, *dkv = _packed(k, v, _wire())
        _fold([(name, dk_b, dv_b) for name, _, dk_b, dv_b in grads], acc, dkv, sd)
        if s > 0:
            dkv_ch.send((dflat,), (t + 1) % 2)
        for b, (_, dq_b, _, _) in zip(blocks, grads, strict=True):  # behind the send: overlaps it
            dq.add(b.q, dq_b)
        if t > 0:
            dkv_ch.release(t % 2)
            if s > 0:
                kv_ch.release(t % 2)
    for ch in (kv_ch, dkv_ch):
        if ch is not None:
            ch.join()
    return dq.result()[0], *dkv


__all__ = ["DKV_WIRE_DTYPE", "Problem", "Rows", "backward", "forward", "part"]
