"""Merging partial attention results by their log-sum-exp (the online-softmax identity).

A block of keys gives each query row a normalised output ``o_b`` and ``lse_b = log sum exp`` of
its scores. Two blocks over disjoint keys combine exactly:

    lse = log(exp(lse_a) + exp(lse_b)),   o = exp(lse_a - lse) o_a + exp(lse_b - lse) o_b

computed in fp32 whatever the dtypes are, and written once in the destination's dtype. ``lse``
tensors are aligned with the outputs (the head dimension, last, of size 1). A row that no key
reached has ``lse = -inf`` and contributes nothing (no NaN).

On CUDA the merge is one fused Triton kernel: each element is read twice and written once, a
third of the memory traffic of the formula in separate torch operations and one launch instead
of nine. Elsewhere (and for head dimensions that are not powers of two) torch operations.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only installs: the torch operations below
    triton = None


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
    if triton is not None and out.is_cuda and _fits_kernel(a, b, out):
        _merge_cuda(a, lse_a, b, lse_b, out, lse_out)
        return
    w_a, w_b, lse = weights(lse_a, lse_b)
    out.copy_(a * w_a + b * w_b)
    lse_out.copy_(lse)


def _fits_kernel(*ts) -> bool:
    d = ts[0].shape[-1]
    rows_dense = all(t.dim() in (3, 4) and t.stride(-1) == 1 for t in ts)
    return rows_dense and d & (d - 1) == 0 and 16 <= d <= 256


def _as_bhsd(t: torch.Tensor) -> torch.Tensor:
    """``[batch, heads, seq, dim]`` view of a dense tensor or of a packed ``[tokens, heads,
    dim]`` one (no copy)."""
    return t if t.dim() == 4 else t.unsqueeze(0).transpose(1, 2)


def _merge_cuda(a, lse_a, b, lse_b, out, lse_out) -> None:
    views = [_as_bhsd(t) for t in (a, b, out, lse_a, lse_b, lse_out)]
    batch, heads, seq, d = views[2].shape
    strides = [st for v in views for st in v.stride()[:3]]
    rows = 64 if d <= 128 else 32
    grid = (batch * heads, triton.cdiv(seq, rows))
    _merge_kernel[grid](*views, *strides, heads, seq, D=d, ROWS=rows)


if triton is not None:

    @triton.jit
    def _merge_kernel(
        a, b, o, la, lb, lo,
        a_b, a_h, a_s, b_b, b_h, b_s, o_b, o_h, o_s,
        la_b, la_h, la_s, lb_b, lb_h, lb_s, lo_b, lo_h, lo_s,
        H, S, D: tl.constexpr, ROWS: tl.constexpr,
    ):  # fmt: skip
        """One program: ROWS rows of one (batch, head); every row's D elements at once. Rows
        may alias (o is a, lo is la): each program reads its rows before writing them, and a
        barrier keeps every warp's reads ahead of any warp's writes (the lse rows are read by
        all warps of the program, so without it a fast warp overwrites them under a slow one)."""
        bh = tl.program_id(0).to(tl.int64)  # 64-bit offsets: tensors may pass 2**31 elements
        bi, hi = bh // H, bh % H
        r = tl.program_id(1).to(tl.int64) * ROWS + tl.arange(0, ROWS)
        rm = r < S
        c = tl.arange(0, D)
        x = tl.load(la + bi * la_b + hi * la_h + r * la_s, mask=rm, other=-float("inf"))
        y = tl.load(lb + bi * lb_b + hi * lb_h + r * lb_s, mask=rm, other=-float("inf"))
        m = tl.maximum(x, y)
        m = tl.where(m == -float("inf"), 0.0, m)
        ex, ey = tl.exp(x - m), tl.exp(y - m)
        total = ex + ey
        reached = total > 0
        wx = tl.where(reached, ex / total, 0.0)
        wy = tl.where(reached, ey / total, 0.0)
        m2 = rm[:, None]
        va = tl.load(a + bi * a_b + hi * a_h + r[:, None] * a_s + c[None, :], mask=m2)
        vb = tl.load(b + bi * b_b + hi * b_h + r[:, None] * b_s + c[None, :], mask=m2)
        v = va.to(tl.float32) * wx[:, None] + vb.to(tl.float32) * wy[:, None]
        tl.debug_barrier()
        tl.store(lo + bi * lo_b + hi * lo_h + r * lo_s,
                 tl.where(reached, m + tl.log(total), -float("inf")), mask=rm)  # fmt: skip
        tl.store(o + bi * o_b + hi * o_h + r[:, None] * o_s + c[None, :],
                 v.to(o.dtype.element_ty), mask=m2)  # fmt: skip


__all__ = ["merge", "weights"]
