"""Ring attention under ``shard_map`` (Liu et al., "Ring Attention"; zigzag balance of Brandon
et al.): the K/V shards travel around the ring by gshmem permutes while every device attends to
the shard it holds (schedule.py), folding each block into fp32 accumulators by log-sum-exp
(merge.py). The backward runs the steps in reverse (as gshmem.attention's does, docs/jax.md):
it starts from the shard the forward held last (kept as a residual), shards move to the left
neighbour with their dK/dV in fp32, and each device ends on its own shard, so its dK/dV arrive
finished with no hop after the last block (K/V travel W - 2 hops). The local blocks' gradients
use the merged output and log-sum-exp (local.py).

Overlap: every rotation is split (split.py): it starts before the blocks of the step that does
not need it and is done after them, so the copy engines move the next shard while the blocks
compute. In the backward the incoming dK/dV are waited for only after the step's own block
gradients. Channels: K, V on 1, 2 (forward and backward), dK, dV on 3, 4.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gshmem._errors import UsageError
from gshmem.attention.layout import check_layout
from gshmem.jax.attention.local import block, block_grads
from gshmem.jax.attention.merge import merge
from gshmem.jax.attention.schedule import SELECT, part_range, source_before, step_blocks

SEQ = 1  # q, k, v: [batch, seq, heads, dim], JAX's attention layout
# "auto" gathers from this many devices on. At two, the one-program all-gather (gather.py's
# first version: two batch-2 calls against a reordered copy of the whole K/V) lost to the ring
# at every size measured (2 x H100, causal 2K/4K/8K per GPU: 55.9/72.9/79.1 % against
# 58.4/76.3/83.2 %); at four it won (57.9/71.5/90.6 % against 48.5/68.3/87.0 %).
GATHER_FROM = 3


@dataclass(frozen=True)
class Problem:
    axis_name: Any
    world: int
    causal: bool
    layout: str
    scale: float
    implementation: str | None
    mesh: Any


def _part(x, part: str, front):
    """Tokens of ``part`` of a local shard (SELECT: front half where ``front``, else back)."""
    import jax
    import jax.numpy as jnp

    length = x.shape[SEQ]
    if part != SELECT:
        a, b = part_range(part, length)
        return jax.lax.slice_in_dim(x, a, b, axis=SEQ)
    half = length // 2
    return jax.lax.dynamic_slice_in_dim(x, jnp.where(front, 0, half), half, axis=SEQ)


def _set_part(x, part: str, front, value):
    import jax
    import jax.numpy as jnp

    length = x.shape[SEQ]
    if part == SELECT:
        return jax.lax.dynamic_update_slice_in_dim(x, value, jnp.where(front, 0, length // 2), SEQ)
    a, _ = part_range(part, length)
    return jax.lax.dynamic_update_slice_in_dim(x, value, a, SEQ)


KV_CHANNEL, DKV_CHANNEL = 1, 3  # split.py channels: (K, V) and (dK, dV)


def _start(p: Problem, tree, step: int, channel: int):
    """Starts sending ``tree`` to the neighbour ``step`` places on (+1: right, -1: left)."""
    from gshmem.jax.split import shift_start

    return shift_start(tree, p.axis_name, step, channel=channel, mesh=p.mesh)


def forward(p: Problem, q, k, v):
    """(output in q's dtype, fp32 lse [B, T, N], the K/V shard held last) of this device's
    queries against the sequence."""
    import jax
    import jax.numpy as jnp

    from gshmem.jax.split import hold_all, ppermute_done

    me = jax.lax.axis_index(p.axis_name)
    # step 0's block (every row) as the kernel gave it: the fp32 accumulator is born at the
    # first merge, which XLA fuses, so no pass writes it before (at two devices none at all)
    out = lse = None
    kv = (k, v)
    for s in range(p.world):
        nxt = _start(p, kv, 1, KV_CHANNEL) if s + 1 < p.world else None
        held, (nxt,) = hold_all(kv, [nxt])
        front = source_before(s, me)
        for b in step_blocks(s, p.world, p.layout, p.causal):
            kb, vb = (_part(t, b.kv, front) for t in held)
            o_b, lse_b = block(_part(q, b.q, front), kb, vb, b.causal, p.scale, p.implementation)
            if b.if_source_before:
                lse_b = jnp.where(front, lse_b, -jnp.inf)
            if out is None:  # step 0: one block over every row
                out, lse = o_b, lse_b
                continue
            out = out.astype(jnp.float32)
            o_r, lse_r = merge(_part(out, b.q, front), _part(lse, b.q, front), o_b, lse_b)
            out, lse = _set_part(out, b.q, front, o_r), _set_part(lse, b.q, front, lse_r)
        if nxt is not None:
            kv = ppermute_done(nxt, out, lse)
    return out.astype(q.dtype), lse, kv


def backward(p: Problem, q, k, v, out, lse, last, do):
    """(dq, dk, dv) of this device's shards; ``last``: the forward's last K/V shard."""
    import jax
    import jax.numpy as jnp

    from gshmem.jax.split import hold_all, ppermute_done

    me = jax.lax.axis_index(p.axis_name)
    dq = jnp.zeros(q.shape, jnp.float32)
    kv, dkv_sent = last, None  # dkv_sent: the dK/dV rotation started by the previous step
    dkv = (jnp.zeros(k.shape, jnp.float32), jnp.zeros(v.shape, jnp.float32))
    for t in range(p.world):
        s = p.world - 1 - t  # the forward's step with the same shard
        # the next step's K/V: the left neighbour's shard, or this device's own for step 0
        nxt = _start(p, kv, -1, KV_CHANNEL) if s > 1 else None
        held, (nxt, dkv_sent) = hold_all(kv, [nxt, dkv_sent])
        front = source_before(s, me)
        grads = []
        for b in step_blocks(s, p.world, p.layout, p.causal):
            rows = [_part(t, b.q, front) for t in (q, do, out, lse)]
            kb, vb = (_part(t, b.kv, front) for t in held)
            g = block_grads(rows[0], kb, vb, b.causal, p.scale, p.implementation, *rows[1:])
            if b.if_source_before:
                g = tuple(jnp.where(front, x, 0) for x in g)
            grads.append((b, g))
        if dkv_sent is not None:  # this shard's running sums, after the block gradients
            dkv = ppermute_done(dkv_sent, [g for _, g in grads])
        for b, (dq_b, dk_b, dv_b) in grads:
            dq = _set_part(dq, b.q, front, _part(dq, b.q, front) + dq_b)
            dkv = tuple(_set_part(a, b.kv, front, _part(a, b.kv, front) + g)
                        for a, g in zip(dkv, (dk_b, dv_b), strict=True))  # fmt: skip
        if s > 0:  # a step follows
            dkv_sent = _start(p, dkv, -1, DKV_CHANNEL)
            kv = (k, v) if s == 1 else ppermute_done(nxt, [g for _, g in grads])
    return dq.astype(q.dtype), dkv[0].astype(k.dtype), dkv[1].astype(v.dtype)


def _check(q, k, v, layout: str) -> None:
    if q.ndim != 4 or k.shape != v.shape or k.ndim != 4:
        raise UsageError(f"ring_attention: q [B, T, N, D] and k, v [B, T, Nkv, D] alike; got "
                         f"{q.shape}, {k.shape}, {v.shape}")  # fmt: skip
    if (q.shape[0], q.shape[1], q.shape[3]) != (k.shape[0], k.shape[1], k.shape[3]):
        raise UsageError(f"ring_attention: q {q.shape} and k {k.shape} differ in batch, "
                         "length or head dimension")  # fmt: skip
    if q.shape[2] % k.shape[2]:
        raise UsageError(f"ring_attention: {k.shape[2]} K/V heads do not divide {q.shape[2]} "
                         "query heads")  # fmt: skip
    if q.dtype != k.dtype or k.dtype != v.dtype:
        raise UsageError(f"ring_attention: q, k, v dtypes differ ({q.dtype}, {k.dtype}, {v.dtype})")
    if layout == "zigzag" and q.shape[SEQ] % 2:
        raise UsageError(f"ring_attention: zigzag shards hold two halves; {q.shape[SEQ]} tokens "
                         "per device is odd")  # fmt: skip


def ring_attention(q, k, v, axis_name, *, causal: bool = True, layout: str = "zigzag",
                   scale: float | None = None, implementation: str | None = None,
                   mesh: Any = None, algorithm: str = "auto"):  # fmt: skip
    """Attention of this device's queries against the whole sequence sharded over
    ``axis_name``, inside ``shard_map``; differentiable (``jax.custom_vjp``).

    q: [batch, T, heads, dim], k/v: [batch, T, kv_heads, dim] (GQA/MQA: kv_heads divides heads;
    K/V are not expanded), this device's shard in ``layout`` ("zigzag": halves i and 2W-1-i of
    the sequence cut in 2W, balanced under a causal mask; "contiguous": block i), as
    ``shard`` makes it. ``implementation`` goes to ``jax.nn.dot_product_attention``.
    ``algorithm``: "ring", "allgather" (gather.py: the whole sequence's K/V gathered once, two
    kernel calls per pass) or "auto" (as gshmem.attention.ring_attention decides it, with
    ``GSHMEM_ATTENTION_ALGORITHM``, except that two devices take the ring: GATHER_FROM).
    Collective over the axis: every device calls it with the same shapes."""
    import jax

    from gshmem.attention.algorithm import choose
    from gshmem.jax.attention import gather
    from gshmem.jax.ops import _axis

    check_layout(layout)
    world = _axis(axis_name, mesh).size
    _check(q, k, v, layout)
    p = Problem(axis_name, world, causal, layout, q.shape[-1] ** -0.5 if scale is None else scale,
                implementation, mesh)  # fmt: skip

    # a reader's gathered K/V, once per batch entry of the gather's unmasked call (gather.py)
    kv_bytes = 2 * k.size * k.dtype.itemsize * gather.entries(world, layout, causal)
    run_forward, run_backward = forward, backward  # the ring's
    if (
        choose(algorithm, world, q.shape[SEQ], False, kv_bytes, gather_from=GATHER_FROM)
        == "allgather"
    ):
        run_forward, run_backward = gather.forward, gather.backward

    @jax.custom_vjp
    def attend(q, k, v):
        return run_forward(p, q, k, v)[0]

    def fwd(q, k, v):
        out, lse, last = run_forward(p, q, k, v)
        return out, (q, k, v, out, lse, last)

    def bwd(res, do):
        return run_backward(p, *res, do)

    attend.defvjp(fwd, bwd)
    return attend(q, k, v)


__all__ = ["Problem", "backward", "forward", "ring_attention"]
