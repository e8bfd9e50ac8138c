"""Combining partial attention outputs by their log-sum-exp, in fp32: the result of attending to
the union of two key sets from the results of attending to each (Milakov & Gimelshein; the
flash-attention recurrence)."""

from __future__ import annotations

from typing import Any


def merge(o: Any, lse: Any, o_b: Any, lse_b: Any) -> tuple[Any, Any]:
    """(o, lse) of two partials (o: [..., T, N, D], lse: [..., T, N], fp32). An lse of -inf
    (no keys) contributes nothing; two -inf give zeros and -inf."""
    import jax.numpy as jnp

    new = jnp.logaddexp(lse, lse_b)
    safe = jnp.where(jnp.isfinite(new), new, 0.0)
    w, w_b = jnp.exp(lse - safe)[..., None], jnp.exp(lse_b - safe)[..., None]
    return w * o + w_b * o_b.astype(jnp.float32), new


__all__ = ["merge"]
