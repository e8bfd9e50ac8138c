"""A rank's key (or value) gradient in the all-gather's backward (gather.py): its own block's
plus the receive slots the other ranks returned, added in fp32 and rounded once.

The slots lie sequence-major (``[slot, batch, seq, heads, dim]``, as the puts left them); the
rank's own gradient and the result are ``[batch, heads, seq, dim]``. The front half of the shard
adds the first ``front`` slots, the back half the first ``back`` (gather_schedule.sum_slots: each
half's slots are a run from slot 0).

On CUDA one Triton kernel per tensor reads every slot and the own gradient once and writes the
result once; the torch operations it replaces wrote an fp32 sum and read it back, in five
launches (measured at 8K tokens per GPU, CP = 4: ~0.19 ms of a 14 ms call; docs/attention.md).
Elsewhere, and for head dimensions that are not powers of two, torch operations.
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


def own_plus_slots(own: torch.Tensor, slots: torch.Tensor, front: int, back: int,
                   out: torch.Tensor) -> None:  # fmt: skip
    """``out`` = ``own`` + the sum of ``slots[:front]`` over the shard's front half and of
    ``slots[:back]`` over its back half, in fp32, rounded once to ``out``'s dtype."""
    half = own.shape[2] // 2
    if triton is not None and out.is_cuda and _fits_kernel(own, slots, out):
        _own_plus_slots_cuda(own, slots, front, back, half, out)
        return
    import torch

    acc = own.to(torch.float32, copy=True)  # float() would alias an fp32 ``own``
    for (a, z), n in (((0, half), front), ((half, own.shape[2]), back)):
        if n:
            run = torch.sum(slots[:n, :, a:z], dim=0, dtype=torch.float32)
            acc[:, :, a:z] += run.transpose(1, 2)
    out.copy_(acc)


def _fits_kernel(*ts) -> bool:
    d = ts[0].shape[-1]
    return all(t.stride(-1) == 1 for t in ts) and d & (d - 1) == 0 and 16 <= d <= 256


def _own_plus_slots_cuda(own, slots, front: int, back: int, half: int, out) -> None:
    batch, heads, seq, d = out.shape
    rows = 64 if d <= 128 else 32
    grid = (batch * heads, triton.cdiv(seq, rows))
    _kernel[grid](
        own, slots, out, *own.stride()[:3], *slots.stride()[:4], *out.stride()[:3],
        heads, seq, half, front, back, max(front, back), D=d, ROWS=rows,
    )  # fmt: skip


if triton is not None:

    @triton.jit
    def _kernel(
        own, slots, out,
        w_b, w_h, w_s, s_n, s_b, s_s, s_h, o_b, o_h, o_s,
        H, S, HALF, FRONT, BACK, SLOTS, D: tl.constexpr, ROWS: tl.constexpr,
    ):  # fmt: skip
        """One program: ROWS rows of one (batch, head), every row's D elements at once; a row
        adds the first FRONT slots in the front half, the first BACK in the back half."""
        bh = tl.program_id(0).to(tl.int64)  # 64-bit offsets: tensors may pass 2**31 elements
        bi, hi = bh // H, bh % H
        r = tl.program_id(1).to(tl.int64) * ROWS + tl.arange(0, ROWS)
        rm = r < S
        n = tl.where(r < HALF, FRONT, BACK)
        c = tl.arange(0, D)
        acc = tl.load(own + bi * w_b + hi * w_h + r[:, None] * w_s + c[None, :],
                      mask=rm[:, None]).to(tl.float32)  # fmt: skip
        base = slots + bi * s_b + hi * s_h + r[:, None] * s_s + c[None, :]
        for i in range(0, SLOTS):
            m = (rm & (i < n))[:, None]
            acc += tl.load(base + i * s_n, mask=m, other=0.0).to(tl.float32)
        tl.store(out + bi * o_b + hi * o_h + r[:, None] * o_s + c[None, :],
                 acc.to(out.dtype.element_ty), mask=rm[:, None])  # fmt: skip


__all__ = ["own_plus_slots"]
