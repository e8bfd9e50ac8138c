"""Context-parallel ring attention for JAX on gshmem (docs/jax.md): ``ring_attention`` inside
``jax.jit`` + ``shard_map``, and ``shard``/``unshard`` to lay a sequence out for it.

The pieces, as in the PyTorch version: ``schedule`` (the blocks of each step, one SPMD program
for every rank), ``local`` (a block and its gradients), ``merge`` (log-sum-exp merge) and
``ring`` (the forward and backward loops over gshmem permutes).
"""

from gshmem.jax.attention.layout import shard, unshard
from gshmem.jax.attention.ring import ring_attention

__all__ = ["ring_attention", "shard", "unshard"]
