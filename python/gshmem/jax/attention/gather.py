"""The all-gather schedule in JAX (what each rank gathers and which keys each query half sees:
gshmem.attention.gather_schedule, shared with the PyTorch version; docs/jax.md).

One SPMD program must have the same shapes on every rank, while the schedule's unmasked
blocks differ in length from rank to rank (causal zigzag: rank p's front queries see p gathered
halves, its back queries 2W-2-p). So every rank gathers the whole sequence's K/V and lays the
halves out in its own reader order (``reader_order``: the halves its queries see first, as a
prefix, the rest after), keeping the first L = ``key_halves`` of them (the most any query half
of any rank sees). The unmasked blocks are then *one* cuDNN call per pass: the query halves as
``entries`` batch entries (a free reshape of q: [B, T] -> [B * 2, T/2]; one entry where both
halves see the same keys: contiguous or not causal), each against its own copy of the L halves
with its own key length (``key_value_seq_lengths``: keys past it are masked, and cuDNN skips
them). A call per half instead (the previous version) paid the slices of q, dO and the outputs,
cuDNN's per-call work twice and two padded calls where a rank's halves see equally many keys
(4 x H200, 8K tokens per GPU: ~1 ms a call more than PyTorch, whose ranks call exactly).
With the local shard's masked block that is two calls per pass at any W.

The gathering is W-1 split permutes (split.py; shift s brings rank me-s's K/V), started before
the local block, which computes on K/V tied to the starts, and done after it: the copy engines
move the K/V while the masked block runs. Backward: the local block's gradients overlap the
return of the gathered keys' gradients, W-1 split permutes of fp32 slices (shift s sends rank
me-s its share), summed on arrival; the entries' key gradients are summed in fp32 first, and
everything is rounded once at the end.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from gshmem.attention.gather_schedule import prefix_blocks, regions
from gshmem.attention.schedule import FRONT, halves
from gshmem.jax.attention.local import block, block_grads
from gshmem.jax.attention.merge import merge

CHANNELS = (1, 2, 3, 4)  # split.py's channels, shift s on CHANNELS[(s - 1) % 4]


@cache
def reader_order(world: int, layout: str, causal: bool) -> np.ndarray:
    """[W, 2W]: for reader p, the halves (owner * 2 + 0 front / 1 back) in its buffer's order:
    what it attends to without a mask first (as the schedule lays it out), then the rest."""
    rows = []
    for p in range(world):
        got = [2 * r.owner + (0 if h == FRONT else 1)
               for r in regions(world, layout, causal) if r.reader == p
               for h in halves(r.part)]  # fmt: skip
        rows.append(got + [i for i in range(2 * world) if i not in got])
    return np.array(rows, np.int32)


@cache
def half_lengths(world: int, layout: str, causal: bool) -> np.ndarray:
    """[W, 2]: how many gathered halves rank p's front and back queries attend to."""
    out = np.zeros((world, 2), np.int32)
    for p in range(world):
        for name, n in prefix_blocks(p, world, layout, causal):
            for h in halves(name):
                out[p, 0 if h == FRONT else 1] = n
    return out


def entries(world: int, layout: str, causal: bool) -> int:
    """Batch entries per query row of the unmasked call: 2 (front and back half apart) where
    some rank's halves see different keys, else 1 (the whole shard as one entry)."""
    lengths = half_lengths(world, layout, causal)
    return 1 if np.array_equal(lengths[:, 0], lengths[:, 1]) else 2


def key_halves(world: int, layout: str, causal: bool) -> int:
    """L: the most gathered halves any query half of any rank attends to (each entry's keys)."""
    return int(half_lengths(world, layout, causal).max())


def _key_lengths(p, b: int, half: int, me):
    """(key lengths [B * E] in tokens or None where every entry sees all L halves, [B * E]
    whether an entry sees no key) of rank ``me``'s unmasked call."""
    import jax.numpy as jnp

    lengths = half_lengths(p.world, p.layout, p.causal)[:, : entries(p.world, p.layout, p.causal)]
    seen = jnp.tile(jnp.asarray(lengths)[me], b)
    full = bool((lengths == key_halves(p.world, p.layout, p.causal)).all())
    return (None if full else seen * half), seen == 0


def _shift_start(p, x, s: int, sign: int):
    """Starts sending ``x`` to the rank ``sign * s`` places on (split.py)."""
    from gshmem.jax.split import shift_start

    channel = CHANNELS[(s - 1) % len(CHANNELS)]
    return shift_start(x, p.axis_name, sign * s, channel=channel, mesh=p.mesh)


def _reader_index(p, me):
    """[2W]: where each half of rank ``me``'s reader order sits among the halves ordered by
    shift (shift s holds rank me-s's front half at 2s, its back half at 2s+1)."""
    import jax.numpy as jnp

    order = jnp.asarray(reader_order(p.world, p.layout, p.causal))[me]
    return 2 * ((me - order // 2) % p.world) + order % 2


def _lay_out(p, by_shift, me):
    """(K, V) [B * E, L * T/2, Nkv, D]: the first L halves of rank ``me``'s reader order, once
    per entry, from [2 (K/V), B, W (shift), T, Nkv, D] (the shifts' halves already in shift
    order along one axis, so one gather)."""
    import jax.numpy as jnp

    _, b, w, t, nk, d = by_shift.shape
    e, n = entries(p.world, p.layout, p.causal), key_halves(p.world, p.layout, p.causal)
    index = jnp.tile(_reader_index(p, me)[:n], e)
    g = jnp.take(by_shift.reshape(2, b, 2 * w, t // 2, nk, d), index, axis=2)
    g = g.reshape(2, b * e, n * t // 2, nk, d)
    return g[0], g[1]


def _as_entries(x, e: int):
    """[B, T, ...] -> [B * E, T / E, ...]: each row's halves as batch entries (no copy)."""
    return x.reshape(x.shape[0] * e, x.shape[1] // e, *x.shape[2:])


def _as_rows(x, b: int):
    """The inverse of ``_as_entries``."""
    return x.reshape(b, -1, *x.shape[2:])


def forward(p, q, k, v):
    """(output in q's dtype, fp32 lse [B, T, N], the gathered K/V) of this device's queries."""
    import jax
    import jax.numpy as jnp

    from gshmem.jax.split import hold_all, ppermute_done

    kv = jnp.stack([k, v])
    starts = [_shift_start(p, kv, s, 1) for s in range(1, p.world)]
    (q_h, k_h, v_h), starts = hold_all((q, k, v), starts)
    out, lse = block(q_h, k_h, v_h, p.causal, p.scale, p.implementation)  # under the copies
    me = jax.lax.axis_index(p.axis_name)
    by_shift = jnp.stack([kv, *(ppermute_done(st, out, lse) for st in starts)], axis=2)
    gk, gv = _lay_out(p, by_shift, me)
    b, e = q.shape[0], entries(p.world, p.layout, p.causal)
    kv_len, empty = _key_lengths(p, b, q.shape[1] // 2, me)
    o2, lse2 = block(_as_entries(q, e), gk, gv, False, p.scale, p.implementation, kv_len)
    empty = empty[:, None, None]
    o2, lse2 = jnp.where(empty[..., None], 0, o2), jnp.where(empty, -jnp.inf, lse2)
    out, lse = merge(out, lse, _as_rows(o2, b), _as_rows(lse2, b))
    return out.astype(q.dtype), lse, (gk, gv)


def backward(p, q, k, v, out, lse, gathered, do):
    """(dq, dk, dv) of this device's shards."""
    import jax
    import jax.numpy as jnp

    from gshmem.jax.split import hold_all, ppermute_done

    w, (b, t, nk, d) = p.world, k.shape
    me = jax.lax.axis_index(p.axis_name)
    e = entries(w, p.layout, p.causal)
    kv_len, empty = _key_lengths(p, b, t // 2, me)
    rows = [_as_entries(x, e) for x in (q, do, out, lse)]
    dq2, dk2, dv2 = block_grads(rows[0], *gathered, False, p.scale, p.implementation, *rows[1:],
                                kv_len)  # fmt: skip
    dq2 = _as_rows(jnp.where(empty[:, None, None, None], 0, dq2.astype(jnp.float32)), b)
    # the entries' key gradients summed (fp32), then from reader order to shift order, the
    # halves past L (never read unmasked: zero) appended: [2 (K/V), B, W, T, ...]
    n = key_halves(w, p.layout, p.causal)
    dg = jnp.stack([dk2, dv2]).astype(jnp.float32).reshape(2, b, e, n, t // 2, nk, d).sum(2)
    dg = jnp.concatenate([dg, jnp.zeros((2, b, 2 * w - n, t // 2, nk, d), dg.dtype)], axis=2)
    dg = jnp.take(dg, jnp.argsort(_reader_index(p, me)), axis=2).reshape(2, b, w, t, nk, d)
    starts = [_shift_start(p, dg[:, :, s], s, -1) for s in range(1, w)]  # back to rank me - s
    held, starts = hold_all((q, k, v, do, out, lse), starts)
    dq, dk, dv = block_grads(*held[:3], p.causal, p.scale, p.implementation, *held[3:])
    mine = dg[:, :, 0]  # this rank's own halves: never read unmasked (zero), kept for the shapes
    for st in starts:  # each from rank me + s: its share of this rank's shard
        mine = mine + ppermute_done(st, dq, dk, dv)
    dq = (dq.astype(jnp.float32) + dq2).astype(q.dtype)
    return (dq, (dk.astype(jnp.float32) + mine[0]).astype(k.dtype),
            (dv.astype(jnp.float32) + mine[1]).astype(v.dtype))  # fmt: skip


__all__ = ["backward", "entries", "forward", "half_lengths", "key_halves", "reader_order"]
