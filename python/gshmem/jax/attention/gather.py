"""The all-gather schedule in JAX (what each rank gathers and which keys each query half sees:
gshmem.attention.gather_schedule, shared with the PyTorch version; docs/jax.md).

One SPMD program must have the same shapes on every rank, while the schedule's unmasked
blocks differ in length from rank to rank (causal zigzag: rank p's front queries see p gathered
halves, its back queries 2W-2-p). So every rank gathers the whole sequence's K/V (one
``gshmem.jax.all_gather``), lays the 2W halves out in its own reader order (``reader_order``: the
halves its queries see first, as a prefix, the rest after) and runs its two query halves as one
call of batch 2 against that buffer, each half with its own key length
(``key_value_seq_lengths``: keys past it are masked, and a kernel that honours lengths skips
them). With the local shard's masked block that is two calls per pass at any W.

Backward: the local block's gradients, the batched block's (both halves' key gradients summed
in fp32), the gathered keys' gradients put back in rank order and reduce-scattered
(``gshmem.jax.psum_scatter``) in fp32 to their owners, rounding once at the end.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from gshmem.attention.gather_schedule import prefix_blocks, regions
from gshmem.attention.schedule import FRONT, halves
from gshmem.jax.attention.local import block, block_grads
from gshmem.jax.attention.merge import merge


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


def _halves_first(x):
    """[B, T, ...] -> [2B, T/2, ...]: the front halves of the batch, then the back halves."""
    import jax.numpy as jnp

    c = x.shape[1] // 2
    return jnp.concatenate([x[:, :c], x[:, c:]], axis=0)


def _halves_back(x, batch: int):
    """The inverse of ``_halves_first``."""
    import jax.numpy as jnp

    return jnp.concatenate([x[:batch], x[batch:]], axis=1)


def _prefix_call(p, q, gk, gv, me):
    """(batched query halves, keys, values, key lengths, which entries see no key)."""
    import jax.numpy as jnp

    b, half = q.shape[0], q.shape[1] // 2
    lengths = jnp.asarray(half_lengths(p.world, p.layout, p.causal))[me] * half
    kv_len = jnp.repeat(lengths, b)  # [2B]: the front entries, then the back ones
    keys = [jnp.concatenate([t, t], axis=0) for t in (gk, gv)]
    return _halves_first(q), *keys, kv_len, kv_len == 0


def _gathered(p, k, v, me):
    """(K, V) of the whole sequence in rank ``me``'s reader order, [B, 2W * T/2, Nkv, D]."""
    import jax.numpy as jnp

    from gshmem.jax.ops import all_gather

    w, (b, t, nk, d) = p.world, k.shape
    everything = all_gather(jnp.stack([k, v]), p.axis_name, mesh=p.mesh)  # [W, 2, B, T, Nk, D]
    h = everything.reshape(w, 2, b, 2, t // 2, nk, d).transpose(0, 3, 1, 2, 4, 5, 6)
    h = h.reshape(2 * w, 2, b, t // 2, nk, d)  # halves in rank order
    g = jnp.take(h, jnp.asarray(reader_order(w, p.layout, p.causal))[me], axis=0)
    g = g.transpose(1, 2, 0, 3, 4, 5).reshape(2, b, w * t, nk, d)
    return g[0], g[1]


def forward(p, q, k, v):
    """(output in q's dtype, fp32 lse [B, T, N], the gathered K/V) of this device's queries."""
    import jax
    import jax.numpy as jnp

    out, lse = block(q, k, v, p.causal, p.scale, p.implementation)
    me = jax.lax.axis_index(p.axis_name)
    gk, gv = _gathered(p, k, v, me)
    q2, k2, v2, kv_len, empty = _prefix_call(p, q, gk, gv, me)
    o2, lse2 = block(q2, k2, v2, False, p.scale, p.implementation, kv_len)
    lse2 = jnp.where(empty[:, None, None], -jnp.inf, lse2)
    o2 = jnp.where(empty[:, None, None, None], 0, o2)
    b = q.shape[0]
    out, lse = merge(out, lse, _halves_back(o2, b), _halves_back(lse2, b))
    return out.astype(q.dtype), lse, (gk, gv)


def backward(p, q, k, v, out, lse, gathered, do):
    """(dq, dk, dv) of this device's shards."""
    import jax
    import jax.numpy as jnp

    from gshmem.jax.ops import psum_scatter

    w, (b, t, nk, d) = p.world, k.shape
    dq, dk, dv = block_grads(q, k, v, p.causal, p.scale, p.implementation, do, out, lse)
    me = jax.lax.axis_index(p.axis_name)
    q2, k2, v2, kv_len, empty = _prefix_call(p, q, *gathered, me)
    rows = [_halves_first(x) for x in (do, out, lse)]
    dq2, dk2, dv2 = block_grads(q2, k2, v2, False, p.scale, p.implementation, *rows, kv_len)
    dq2 = jnp.where(empty[:, None, None, None], 0, dq2.astype(jnp.float32))
    dq = (dq.astype(jnp.float32) + _halves_back(dq2, b)).astype(q.dtype)
    # both halves' key gradients (fp32), back in rank order, then summed onto their owners
    dg = jnp.stack([x[:b].astype(jnp.float32) + x[b:].astype(jnp.float32) for x in (dk2, dv2)])
    dg = dg.reshape(2, b, 2 * w, t // 2, nk, d).transpose(2, 0, 1, 3, 4, 5)
    inverse = jnp.asarray(np.argsort(reader_order(w, p.layout, p.causal), axis=1))[me]
    dg = jnp.take(dg, inverse, axis=0).reshape(w, 2, 2, b, t // 2, nk, d)  # [W, half, k/v, ...]
    dg = dg.transpose(0, 2, 3, 1, 4, 5, 6).reshape(w, 2, b, t, nk, d)
    mine = psum_scatter(dg, p.axis_name, mesh=p.mesh)  # [2, B, T, Nk, D]: this shard's sums
    return (dq, (dk.astype(jnp.float32) + mine[0]).astype(k.dtype),
            (dv.astype(jnp.float32) + mine[1]).astype(v.dtype))  # fmt: skip


__all__ = ["backward", "forward", "half_lengths", "reader_order"]
