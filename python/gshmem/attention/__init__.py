"""Context-parallel attention on gshmem: ring attention for PyTorch (docs/attention.md).

::

    import gshmem
    from gshmem.attention import ring_attention, zigzag_shard

    comm = gshmem.init()
    q = zigzag_shard(q_full, comm.nranks, comm.rank)       # [batch, heads, seq / W, dim]
    k, v = (zigzag_shard(t, comm.nranks, comm.rank) for t in (k_full, v_full))
    out = ring_attention(q, k, v, comm=comm, causal=True)  # collective; differentiable

The pieces, each its own module: ``layout`` (who holds which tokens; shard/unshard helpers),
``schedule`` (which blocks each ring step computes), ``local`` (the per-block kernels),
``merge`` (log-sum-exp merge of partial results), ``transport`` (the ring's channels over
gshmem or NCCL), ``ring`` (the forward and backward loops) and ``ops`` (the public call and its
torch custom ops). ``hf`` plugs it into Hugging Face transformers models.
"""

from gshmem.attention.layout import shard, token_index, unshard, zigzag_shard, zigzag_unshard

__all__ = [
    "ring_attention",
    "shard",
    "token_index",
    "unshard",
    "zigzag_shard",
    "zigzag_unshard",
]


def __getattr__(name: str):
    # ring_attention registers torch custom ops; load it on first use so the layout helpers
    # (and the CPU tests of the schedule and merge) import without touching the op registry.
    if name == "ring_attention":
        from gshmem.attention.ops import ring_attention

        return ring_attention
    raise AttributeError(f"module 'gshmem.attention' has no attribute {name!r}")
