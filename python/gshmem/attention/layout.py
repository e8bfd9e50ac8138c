"""Which tokens of the full sequence each rank of a context-parallel group holds.

Two layouts over a group of W ranks (the sequence is cut along ``dim``):

* ``"contiguous"``: W equal chunks; rank r holds chunk r. Under a causal mask rank W-1 does W
  times the work of rank 0.
* ``"zigzag"``: 2W equal chunks; rank r holds chunk r followed by chunk 2W-1-r (its *front* and
  *back* halves), so every rank does the same causal work.

Packed documents (``cu_seqlens``: the global document boundaries, int32, starting at 0 and ending
at the sequence length) use the zigzag layout per document: every document is cut into 2W
chunks, and rank r holds chunk r of every document, in document order (its front half),
followed by chunk 2W-1-r of every document (its back half). Each document must have a length
divisible by 2W; the front and back halves then both have boundaries ``cu_seqlens // 2W``.

Everything here is index arithmetic on the host plus one gather, so it runs on any device.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from gshmem._errors import UsageError

if TYPE_CHECKING:
    import torch

LAYOUTS = ("zigzag", "contiguous")


def check_layout(layout: str) -> str:
    if layout not in LAYOUTS:
        raise UsageError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    return layout


def document_lengths(cu_seqlens: torch.Tensor | Sequence[int], world: int) -> list[int]:
    """Lengths of the packed documents, checked: ``cu_seqlens`` starts at 0, never decreases,
    and every document length divides by 2 x ``world`` (the zigzag chunks)."""
    bounds = [
        int(b) for b in (cu_seqlens.tolist() if hasattr(cu_seqlens, "tolist") else cu_seqlens)
    ]
    if len(bounds) < 2 or bounds[0] != 0:
        raise UsageError(
            f"cu_seqlens must start at 0 and hold at least one document, got {bounds[:8]}"
        )
    lengths = [b - a for a, b in zip(bounds, bounds[1:], strict=False)]
    if any(n < 0 for n in lengths):
        raise UsageError("cu_seqlens must not decrease")
    bad = [i for i, n in enumerate(lengths) if n % (2 * world)]
    if bad:
        raise UsageError(
            f"document {bad[0]} has {lengths[bad[0]]} tokens, not a multiple of 2 x {world} "
            f"(the zigzag layout cuts every document into 2 x world chunks); pad documents to a "
            f"multiple of {2 * world}"
        )
    return lengths


def token_index(
    seq_len: int,
    world: int,
    rank: int,
    layout: str = "zigzag",
    cu_seqlens: torch.Tensor | Sequence[int] | None = None,
) -> list[int]:
    """Positions in the full sequence of rank ``rank``'s tokens, in its local order."""
    check_layout(layout)
    if not 0 <= rank < world:
        raise UsageError(f"rank {rank} is outside a group of {world}")
    if cu_seqlens is not None:
        if layout != "zigzag":
            raise UsageError("packed documents (cu_seqlens) need layout='zigzag'")
        lengths = document_lengths(cu_seqlens, world)
        if sum(lengths) != seq_len:
            raise UsageError(
                f"cu_seqlens covers {sum(lengths)} tokens but the sequence has {seq_len}"
            )
        starts = [sum(lengths[:i]) for i in range(len(lengths))]
        front, back = [], []
        for start, n in zip(starts, lengths, strict=True):
            c = n // (2 * world)
            front += range(start + rank * c, start + (rank + 1) * c)
            back += range(start + (2 * world - 1 - rank) * c, start + (2 * world - rank) * c)
        return front + back
    parts = world if layout == "contiguous" else 2 * world
    if seq_len % parts:
        raise UsageError(
            f"a sequence of {seq_len} tokens cannot be cut into {parts} equal chunks "
            f"(layout {layout!r} over {world} ranks); use a length divisible by {parts}"
        )
    c = seq_len // parts
    if layout == "contiguous":
        return list(range(rank * c, (rank + 1) * c))
    back = 2 * world - 1 - rank
    return list(range(rank * c, (rank + 1) * c)) + list(range(back * c, (back + 1) * c))


def shard(
    x: torch.Tensor,
    world: int,
    rank: int,
    layout: str = "zigzag",
    dim: int = 2,
    cu_seqlens: torch.Tensor | Sequence[int] | None = None,
) -> torch.Tensor:
    """Rank ``rank``'s part of the full tensor ``x`` (cut along ``dim``), as a new tensor."""
    import torch

    idx = token_index(x.shape[dim], world, rank, layout, cu_seqlens)
    return x.index_select(dim, torch.tensor(idx, device=x.device))


def unshard(
    shards: Sequence[torch.Tensor],
    layout: str = "zigzag",
    dim: int = 2,
    cu_seqlens: torch.Tensor | Sequence[int] | None = None,
) -> torch.Tensor:
    """The full tensor from every rank's shard (``shards[r]`` from rank r): inverse of ``shard``."""
    import torch

    world = len(shards)
    if world == 0:
        raise UsageError("unshard needs every rank's shard, got none")
    local = shards[0].shape[dim]
    if any(s.shape[dim] != local for s in shards):
        raise UsageError("unshard: every shard must have the same length along dim")
    total = local * world
    order = [i for r in range(world) for i in token_index(total, world, r, layout, cu_seqlens)]
    inverse = torch.empty(total, dtype=torch.long)
    inverse[torch.tensor(order)] = torch.arange(total)
    return torch.cat(list(shards), dim).index_select(dim, inverse.to(shards[0].device))


def zigzag_shard(
    x: torch.Tensor,
    world: int,
    rank: int,
    dim: int = 2,
    cu_seqlens: torch.Tensor | Sequence[int] | None = None,
) -> torch.Tensor:
    """``shard`` with the zigzag layout (per document when ``cu_seqlens`` is given)."""
    return shard(x, world, rank, "zigzag", dim, cu_seqlens)


def zigzag_unshard(
    shards: Sequence[torch.Tensor],
    dim: int = 2,
    cu_seqlens: torch.Tensor | Sequence[int] | None = None,
) -> torch.Tensor:
    """``unshard`` with the zigzag layout (per document when ``cu_seqlens`` is given)."""
    return unshard(shards, "zigzag", dim, cu_seqlens)


__all__ = [
    "LAYOUTS",
    "check_layout",
    "document_lengths",
    "shard",
    "token_index",
    "unshard",
    "zigzag_shard",
    "zigzag_unshard",
]
