"""The all-gather schedule in JAX (what each rank gathers and which keys each query half sees:
gshmem.attention.gather_schedule, shared with the PyTorch version; docs/jax.md).

One SPMD program must have the same shapes on every rank, while the schedule's unmasked
blocks differ in length from rank to rank (causal zigzag: rank p's front queries see p gathered
halves, its back queries 2W-2-p). So every rank gathers the whole sequence's K/V, lays the 2W
halves out in its own reader order (``reader_order``: the halves its queries see first, as a
prefix, the rest after) and runs its two query halves against that buffer, one call per half,
each with its own key length (``key_value_seq_lengths``: keys past it are masked, and a kernel
that honours lengths skips them). Both calls read the one buffer: stacking the halves as one
call of batch 2 would need the whole K/V twice. With the local shard's masked block that is
three calls per pass at any W.

The gathering is W-1 split permutes (split.py; shift s brings rank me-s's K/V), started before
the local block, which computes on K/V tied to the starts, and done after it: the copy engines
move the K/V while the masked block runs. Backward: the local block's gradients overlap the
return of the gathered keys' gradients, W-1 split permutes of fp32 slices (shift s sends rank
me-s its share), summed on arrival; both halves' key gradients are summed in fp32 first, and
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


def _prefix_halves(p, q, me):
    """[(query slice, key lengths [B], whether those queries see no key)] of the front and the
    back half of rank ``me``'s queries against its gathered K/V."""
    import jax.numpy as jnp

    b, half = q.shape[0], q.shape[1] // 2
    lengths = jnp.asarray(half_lengths(p.world, p.layout, p.causal))[me] * half
    return [(slice(i * half, (i + 1) * half), jnp.full((b,), lengths[i]), lengths[i] == 0)
            for i in range(2)]  # fmt: skip


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
    """(K, V) [B, 2W * T/2, Nkv, D] in rank ``me``'s reader order, from [2 (K/V), B, W (shift),
    T, Nkv, D]: the shifts' halves are already in shift order along one axis, so one gather."""
    import jax.numpy as jnp

    _, b, w, t, nk, d = by_shift.shape
    g = jnp.take(by_shift.reshape(2, b, 2 * w, t // 2, nk, d), _reader_index(p, me), axis=2)
    g = g.reshape(2, b, w * t, nk, d)
    return g[0], g[1]


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
    merged = []
    for rows, kv_len, empty in _prefix_halves(p, q, me):
        o2, lse2 = block(q[:, rows], gk, gv, False, p.scale, p.implementation, kv_len)
        o2, lse2 = jnp.where(empty, 0, o2), jnp.where(empty, -jnp.inf, lse2)
        merged.append(merge(out[:, rows], lse[:, rows], o2, lse2))
    out, lse = (jnp.concatenate(x, axis=1) for x in zip(*merged, strict=True))
    return out.astype(q.dtype), lse, (gk, gv)


def backward(p, q, k, v, out, lse, gathered, do):
    """(dq, dk, dv) of this device's shards."""
    import jax
    import jax.numpy as jnp

    from gshmem.jax.split import hold_all, ppermute_done

    w, (b, t, nk, d) = p.world, k.shape
    me = jax.lax.axis_index(p.axis_name)
    dq2, dg = [], 0.0
    for rows, kv_len, empty in _prefix_halves(p, q, me):
        dq_h, dk_h, dv_h = block_grads(q[:, rows], *gathered, False, p.scale, p.implementation,
                                       do[:, rows], out[:, rows], lse[:, rows], kv_len)  # fmt: skip
        dq2.append(jnp.where(empty, 0, dq_h.astype(jnp.float32)))
        dg = dg + jnp.stack([dk_h.astype(jnp.float32), dv_h.astype(jnp.float32)])
    # both halves' key gradients (fp32), from reader order to shift order: [2 (K/V), B, W, T, ...]
    dg = jnp.take(dg.reshape(2, b, 2 * w, t // 2, nk, d), jnp.argsort(_reader_index(p, me)), axis=2)
    dg = dg.reshape(2, b, w, t, nk, d)
    starts = [_shift_start(p, dg[:, :, s], s, -1) for s in range(1, w)]  # back to rank me - s
    held, starts = hold_all((q, k, v, do, out, lse), starts)
    dq, dk, dv = block_grads(*held[:3], p.causal, p.scale, p.implementation, *held[3:])
    mine = dg[:, :, 0]  # this rank's own halves: never read unmasked (zero), kept for the shapes
    for st in starts:  # each from rank me + s: its share of this rank's shard
        mine = mine + ppermute_done(st, dq, dk, dv)
    dq = (dq.astype(jnp.float32) + jnp.concatenate(dq2, axis=1)).astype(q.dtype)
    return (dq, (dk.astype(jnp.float32) + mine[0]).astype(k.dtype),
            (dv.astype(jnp.float32) + mine[1]).astype(v.dtype))  # fmt: skip


__all__ = ["backward", "forward", "half_lengths", "reader_order"]
