"""Merging partial attention results by their log-sum-exp (the online-softmax identity).

A block of keys gives each query row a normalised output ``o_b`` and ``lse_b = log sum exp`` of
its scores. Two blocks over disjoint keys combine exactly:

    lse = log(exp(lse_a) + exp(lse_b)),   o = exp(lse_a - lse) o_a + exp(lse_b - lse) o_b

computed in fp32 whatever the inputs are. ``lse`` tensors are aligned with the outputs: the
output's shape with the head dimension (last) of size 1. A row that no key reached has
``lse = -inf`` and contributes nothing (no NaN).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def weights(lse_a: torch.Tensor, lse_b: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """(w_a, w_b, lse) for merging a and b: the output is ``w_a o_a + w_b o_b``."""
    import torch

    lse = torch.logaddexp(lse_a.float(), lse_b.float())
    finite = torch.isfinite(lse)
    w_a = torch.where(finite, torch.exp(lse_a - lse), 0.0)
    w_b = torch.where(finite, torch.exp(lse_b - lse), 0.0)
    return w_a, w_b, lse


def merge_(
    acc_out: torch.Tensor, acc_lse: torch.Tensor, out: torch.Tensor, lse: torch.Tensor
) -> None:
    """Folds the block (``out``, ``lse``) into the fp32 accumulators (``acc_out``, ``acc_lse``),
    in place (they may be views, e.g. the rows of one half)."""
    w_acc, w_blk, new_lse = weights(acc_lse, lse)
    acc_out.mul_(w_acc).addcmul_(out, w_blk)
    acc_lse.copy_(new_lse)


__all__ = ["merge_", "weights"]
