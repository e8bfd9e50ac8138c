"""One block of ring attention on one device: its output and log-sum-exp, and its gradients
given the *merged* output and log-sum-exp of the whole row.

With w = exp(lse_b - lse) the block's weight in the merge, the exact score gradient of the block
is w P_b ∘ (dP - D), D = rowsum(dO ∘ O). The VJP of the block's own output with cotangent w dO
gives w P_b ∘ (dP - rowsum(dO ∘ O_b)); the rest is P_b ∘ g with g = w (rowsum(dO ∘ O_b) - D), a
score gradient that a cotangent on the block's lse would carry, but jax.nn.dot_product_attention's
VJP ignores one. Its gradients are dq = scale g (P_b K), and dk = scale P_bᵀ (g ∘ q): the output
and the value-gradient of the same block with K in place of V, one more attention call.
"""

from __future__ import annotations

from typing import Any


def block(q, k, v, causal: bool, scale: float, implementation: str | None) -> tuple[Any, Any]:
    """(output [B, Tq, N, D] in q's dtype, lse [B, Tq, N] fp32) of q against k, v."""
    import jax
    import jax.numpy as jnp

    o, lse = jax.nn.dot_product_attention(
        q, k, v, scale=scale, is_causal=causal, implementation=implementation, return_residual=True
    )
    return o, lse.astype(jnp.float32)


def block_grads(q, k, v, causal: bool, scale: float, implementation: str | None, do, out, lse):
    """(dq, dk, dv) of this block, ``do``/``out``/``lse`` being the rows' merged gradient,
    output and log-sum-exp (fp32)."""
    import jax
    import jax.numpy as jnp

    def attend(a, b, c):
        return block(a, b, c, causal, scale, implementation)[0]

    (o_b, lse_b), vjp = jax.vjp(
        lambda a, b, c: block(a, b, c, causal, scale, implementation), q, k, v
    )
    w = jnp.exp(lse_b - lse)[..., None]  # [B, T, N, 1]
    do32 = do.astype(jnp.float32)
    g = w * (jnp.sum(do32 * o_b.astype(jnp.float32), -1, keepdims=True)
             - jnp.sum(do32 * out.astype(jnp.float32), -1, keepdims=True))  # fmt: skip
    dq, dk, dv = vjp(((w * do32).astype(o_b.dtype), jnp.zeros_like(lse_b)))
    pk, vjp_kv = jax.vjp(lambda c: attend(q, k, c), k)  # P_b K, and P_bᵀ G for a cotangent G
    (dk_lse,) = vjp_kv((scale * g * q.astype(jnp.float32)).astype(pk.dtype))
    dq = dq + (scale * g * pk.astype(jnp.float32)).astype(dq.dtype)
    return dq, dk + dk_lse.astype(dk.dtype), dv


__all__ = ["block", "block_grads"]
