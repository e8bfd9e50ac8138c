"""The torch context-parallel baseline: ``torch.distributed.tensor.experimental.context_parallel``
as the suites run it (``bench attention``'s torch_cp columns, ``bench train --backend torch_cp``).

Entering the context shards each buffer in place along its sequence dimension, with head-tail
load balancing under a causal mask: chunks r and 2W-1-r of 2W, which is gshmem's zigzag layout,
so every column holds the same tokens on each rank. Inside it, ``F.scaled_dot_product_attention``
(looked up at call time) runs torch's ring: K/V gathered (``allgather``) or rotated
(``alltoall``) by NCCL collectives."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

ROTATE = ("allgather", "alltoall")


@contextmanager
def context_parallel_shards(mesh: Any, buffers: Sequence[Any], seq_dims: Sequence[int], *,
                            rotate: str = "allgather",
                            load_balance: bool = True) -> Iterator[None]:  # fmt: skip
    """Collective over ``mesh``: shards ``buffers`` in place (not restored on exit) and sends
    SDPA calls to torch's context-parallel attention until exit. ``load_balance`` (head-tail,
    which torch allows only under a causal mask) is restored on exit."""
    from torch.distributed.tensor.experimental import _attention as cp_attention
    from torch.distributed.tensor.experimental import context_parallel

    if rotate not in ROTATE:
        raise ValueError(f"rotate must be one of {', '.join(ROTATE)}, got {rotate!r}")
    opts = cp_attention._cp_options
    old = opts.enable_load_balance
    opts.enable_load_balance = load_balance
    cp_attention.set_rotate_method(rotate)
    try:
        bufs = list(buffers)
        with context_parallel(mesh, buffers=bufs, buffer_seq_dims=list(seq_dims),
                              no_restore_buffers=set(bufs)):  # fmt: skip
            yield
    finally:
        opts.enable_load_balance = old


@contextmanager
def sharded_batch(mesh: Any, tokens: Any, labels: Any) -> Iterator[tuple[Any, Any, Any]]:
    """A training step's batch under torch's context parallelism: yields this rank's (tokens,
    labels, positions) of the whole-sequence ``tokens``/``labels`` [B, S] (labels made on the
    whole sequence), sharded by torch (gshmem.train.cp.shard_batch's zigzag shards); SDPA calls
    inside run torch's ring. Collective over ``mesh``."""
    import torch

    t, y = tokens.clone(), labels.clone()
    positions = torch.arange(tokens.shape[-1], device=tokens.device)
    with context_parallel_shards(mesh, [t, y, positions], [t.dim() - 1, y.dim() - 1, 0]):
        yield t, y, positions


__all__ = ["ROTATE", "context_parallel_shards", "sharded_batch"]
