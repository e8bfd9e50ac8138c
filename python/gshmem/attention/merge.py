"""Merging partial attention results by their log-sum-exp (the online-softmax identity).

A block of keys gives each query row a normalised output ``o_b`` and ``lse_b = log sum exp`` of
its scores. Two blocks over disjoint keys combine exactly:

    lse = log(exp(lse_a) + exp(lse_b)),   o = exp(lse_a - lse) o_a + exp(lse_b - lse) o_b

computed in fp32 whatever the dtypes are, and written once in the destination's dtype. ``lse``
tensors are aligned with the outputs (the head dimension, last, of size 1). A row that no key
reached has ``lse = -inf`` and contributes nothing (no NaN).
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


def merge(a, lse_a, b, lse_b, out, lse_out) -> None:
    """``out, lse_out`` = the merge of (``a``, ``lse_a``) and (``b``, ``lse_b``). All tensors
    have one shape (``lse``: last dimension 1); ``out`` may be ``a`` (in place)."""
    w_a, w_b, lse = weights(lse_a, lse_b)
    out.copy_(a * w_a + b * w_b)
    lse_out.copy_(lse)


__all__ = ["merge", "weights"]
