"""gshmem for JAX: communication inside ``jax.jit`` + ``shard_map`` through XLA FFI custom calls
(docs/jax.md).

    import gshmem.jax as gj
    gj.init()                              # collective, once per process
    with jax.set_mesh(mesh):
        y = jax.jit(jax.shard_map(lambda x: gj.ppermute(x, "cp", perm), ...))(x)
"""

from gshmem.jax.attention import ring_attention
from gshmem.jax.ops import all_gather, all_to_all, explain, ppermute, psum, psum_scatter
from gshmem.jax.runtime import finalize, init

__all__ = [
    "all_gather",
    "all_to_all",
    "explain",
    "finalize",
    "init",
    "ppermute",
    "psum",
    "psum_scatter",
    "ring_attention",
]
