"""The receiver's side: from tokens received per source rank to rows per local expert, and back.

A dispatch leaves in the receiver's buffer one row per (token, source rank) it was sent to, with
the token's top-k restricted to this rank: ``local`` ``[rows, k]`` int32, the local expert of
each of the token's k choices or -1 where the choice is another rank's (or none), and their
weights. ``Pairs`` turns that into what expert computation wants: the (row, choice) pairs sorted
by local expert (stable, so by source rank, then source token within an expert), the number per
expert, and for each (row, choice) the pair it became (``slot``, -1 where none), which the
combine uses to sum each row's experts' outputs back into one row per (token, rank).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Pairs:
    """Expert-major (row, choice) pairs of one dispatch's received rows."""

    row: torch.Tensor  # [pairs] int64: the received row each pair reads
    weight: torch.Tensor  # [pairs] float32: the router's weight of the pair
    per_expert: torch.Tensor  # [local experts] int64: pairs of each expert, in order
    slot: torch.Tensor  # [rows, k] int32: the pair each (row, choice) became, -1 where none


def pairs(local: torch.Tensor, weights: torch.Tensor, num_local: int, num_pairs: int) -> Pairs:
    """The expert-major pairs of received rows whose local experts are ``local`` (``num_pairs``:
    how many entries of ``local`` are >= 0, known to the caller from the count exchange)."""
    import torch

    rows, k = local.shape
    key = torch.where(local >= 0, local, num_local).flatten().long()
    order = torch.sort(key, stable=True).indices[:num_pairs]
    slot = torch.full((rows * k,), -1, dtype=torch.int32, device=local.device)
    slot[order] = torch.arange(num_pairs, dtype=torch.int32, device=local.device)
    per_expert = torch.zeros(num_local + 1, dtype=torch.int64, device=local.device)
    per_expert.scatter_add_(0, key, torch.ones_like(key))
    return Pairs(order // k, weights.flatten()[order], per_expert[:num_local], slot.view(rows, k))


def reduce_rows(y: torch.Tensor, p: Pairs, weighted: bool = True) -> torch.Tensor:
    """``[rows, hidden]`` in y's dtype: each received row's sum of its pairs' rows of ``y``
    (``[pairs, hidden]``), times their weights when ``weighted``, accumulated in fp32 (or y's
    dtype when wider). The reference of the combine's local step (the GPU runs it as one
    kernel)."""
    import torch

    rows, wide = p.slot.shape[0], torch.promote_types(y.dtype, torch.float32)
    acc = torch.zeros((rows, y.shape[1]), dtype=wide, device=y.device)
    terms = y.to(wide) * p.weight[:, None].to(wide) if weighted else y.to(wide)
    acc.index_add_(0, p.row, terms)
    return acc.to(y.dtype)


__all__ = ["Pairs", "pairs", "reduce_rows"]
