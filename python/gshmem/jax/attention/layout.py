"""Laying a whole sequence out for the ring: the global order in which ``shard_map`` blocks
along the sequence give every device its shard (gshmem.attention.layout.token_index says which
tokens a rank holds), and back."""

from __future__ import annotations

from typing import Any

import numpy as np

from gshmem.attention.layout import token_index


def order(seq_len: int, world: int, layout: str = "zigzag") -> np.ndarray:
    """Token positions, device 0's shard first: ``x[:, order]`` sharded contiguously over
    ``world`` devices gives each device its shard."""
    return np.concatenate([token_index(seq_len, world, r, layout) for r in range(world)])


def shard(x: Any, world: int, layout: str = "zigzag", axis: int = 1) -> Any:
    """``x`` (the whole sequence along ``axis``) reordered so that contiguous blocks over the
    mesh axis are the ring's shards."""
    import jax.numpy as jnp

    return jnp.take(x, order(x.shape[axis], world, layout), axis=axis)


def unshard(x: Any, world: int, layout: str = "zigzag", axis: int = 1) -> Any:
    """The inverse of ``shard``."""
    import jax.numpy as jnp

    return jnp.take(x, np.argsort(order(x.shape[axis], world, layout)), axis=axis)


__all__ = ["order", "shard", "unshard"]
