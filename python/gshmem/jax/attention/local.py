"""One block of ring attention on one device: its output and log-sum-exp, and its gradients
given the *merged* output and log-sum-exp of the whole row.

The fast path (cuDNN): a flash-attention backward needs only q, k, v, dO and the row's output
and log-sum-exp; fed the *merged* ones it gives the block's share of the exact gradient directly.
JAX has no public call for it, but the VJP of jax.nn.dot_product_attention(implementation=
"cudnn") keeps exactly those as residuals (the fp32 softmax statistics [B, N, T] and the output):
``_stats`` finds them by identity (the output) and shape and dtype (the statistics), the
backward swaps in the merged ones. The same residuals give the forward its fp32 log-sum-exp (the
returned one is rounded to the inputs' dtype). Where they are not found (another kernel, another
jax), the portable path:

With w = exp(lse_b - lse) the block's weight in the merge, the exact score gradient of the block
is w P_b ∘ (dP - D), D = rowsum(dO ∘ O). The VJP of the block's own output with cotangent w dO
gives w P_b ∘ (dP - rowsum(dO ∘ O_b)); the rest is P_b ∘ g with g = w (rowsum(dO ∘ O_b) - D), a
score gradient that a cotangent on the block's lse would carry, but jax.nn.dot_product_attention's
VJP ignores one. Its gradients are dq = scale g (P_b K), and dk = scale P_bᵀ (g ∘ q): the output
and the value-gradient of the same block with K in place of V, one more attention call.
"""

from __future__ import annotations

from typing import Any


def _attend(q, k, v, causal: bool, scale: float, implementation: str | None, kv_len=None):
    import jax

    def f(a, b, c):
        return jax.nn.dot_product_attention(
            a, b, c, scale=scale, is_causal=causal, implementation=implementation,
            key_value_seq_lengths=kv_len, return_residual=True,
        )  # fmt: skip

    return jax.vjp(f, q, k, v)


def _stats(vjp, out) -> tuple[list, Any, int, int] | None:
    """(leaves, treedef, index of the output, index of the fp32 statistics [B, N, T]) of a
    cuDNN attention VJP's residuals, or None when they are not that."""
    import jax
    import jax.numpy as jnp

    leaves, tree = jax.tree.flatten(vjp)
    b, t, n = out.shape[:3]
    at_out = [i for i, x in enumerate(leaves) if x is out]
    at_stats = [i for i, x in enumerate(leaves)
                if getattr(x, "dtype", None) == jnp.float32 and x.shape == (b, n, t)]  # fmt: skip
    if len(at_out) != 1 or len(at_stats) != 1:
        return None
    return leaves, tree, at_out[0], at_stats[0]


def block(q, k, v, causal: bool, scale: float, implementation: str | None,
          kv_len=None) -> tuple[Any, Any]:  # fmt: skip
    """(output [B, Tq, N, D] in q's dtype, lse [B, Tq, N] fp32) of q against k, v (``kv_len``
    [B]: only that many keys of each batch entry, or all)."""
    import jax.numpy as jnp

    (o, lse), vjp = _attend(q, k, v, causal, scale, implementation, kv_len)
    found = _stats(vjp, o)
    if found is not None:  # cuDNN's own fp32 statistics, not the rounded copy
        leaves, _, _, at = found
        return o, jnp.transpose(leaves[at], (0, 2, 1))
    return o, lse.astype(jnp.float32)


def block_grads(q, k, v, causal: bool, scale: float, implementation: str | None, do, out, lse,
                kv_len=None):  # fmt: skip
    """(dq, dk, dv) of this block, ``do``/``out``/``lse`` being the rows' merged gradient,
    output and log-sum-exp (fp32); ``kv_len`` as in ``block``."""
    import jax
    import jax.numpy as jnp

    (o_b, lse_r), vjp = _attend(q, k, v, causal, scale, implementation, kv_len)
    found = _stats(vjp, o_b)
    if found is not None:  # cuDNN's backward with the merged output and statistics
        leaves, tree, at_out, at_stats = found
        leaves = list(leaves)
        leaves[at_out] = out.astype(o_b.dtype)
        leaves[at_stats] = jnp.transpose(lse, (0, 2, 1)).astype(jnp.float32)
        return jax.tree.unflatten(tree, leaves)((do.astype(o_b.dtype), jnp.zeros_like(lse_r)))
    lse_b = lse_r.astype(jnp.float32)
    w = jnp.exp(lse_b - lse)[..., None]  # [B, T, N, 1]
    do32 = do.astype(jnp.float32)
    g = w * (jnp.sum(do32 * o_b.astype(jnp.float32), -1, keepdims=True)
             - jnp.sum(do32 * out.astype(jnp.float32), -1, keepdims=True))  # fmt: skip
    dq, dk, dv = vjp(((w * do32).astype(o_b.dtype), jnp.zeros_like(lse_r)))
    # P_b K (the block's output with K for V), and P_bᵀ G for a cotangent G
    pk, vjp_kv = jax.vjp(lambda c: _attend(q, k, c, causal, scale, implementation, kv_len)[0][0],
                         k)  # fmt: skip
    (dk_lse,) = vjp_kv((scale * g * q.astype(jnp.float32)).astype(pk.dtype))
    dq = dq + (scale * g * pk.astype(jnp.float32)).astype(dq.dtype)
    return dq, dk + dk_lse.astype(dk.dtype), dv


__all__ = ["block", "block_grads"]
