"""The local attention kernels one ring step runs: a block of queries against a block of keys,
returning the output and its log-sum-exp (forward), or the three gradients (backward).

* ``Dense``: ``[batch, heads, seq, dim]`` tensors. On CUDA, cuDNN's fused attention (measured on
  H100, causal, Llama-3-8B heads: 612-620 TFLOP/s forward against 319-337 for the flash
  kernel PyTorch ships; docs/attention.md); ``GSHMEM_ATTENTION_KERNEL=flash`` picks the flash
  kernel instead.
* ``Varlen``: packed documents, ``[tokens, heads, dim]`` tensors and one ``cu_seqlens`` for
  queries and keys (the halves of a zigzag shard have equal document segments). On CUDA, the
  variable-length flash kernel (cuDNN's has no variable-length path PyTorch exposes).
* On the CPU both use an exact fp32/fp64 implementation, so the whole ring (schedule, merge,
  gradients) runs and is tested without a GPU.

GQA/MQA: keys and values carry fewer heads (a divisor of the query heads); no kernel here
expands them in memory on CUDA, and key/value gradients come back with the key heads.
Backward takes the *final* output and log-sum-exp of the whole row (not the block's): the
gradient of a block is then exactly its share of the full softmax's gradient.
The lse tensors are aligned with the outputs (head-dim of size 1), fp32.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from gshmem._errors import UsageError

if TYPE_CHECKING:
    import torch


def _ops():
    import torch

    return torch.ops.aten


_rng_states: dict[tuple, torch.Tensor] = {}


def _rng_state(device: torch.device, shape: tuple[int, ...], dtype: torch.dtype):
    """The dropout RNG state the backward kernels take (unused: no dropout), made once per
    device: a fresh one would cost a fill kernel per block."""
    import torch

    key = (device, shape, dtype)
    state = _rng_states.get(key)
    if state is None:
        state = torch.zeros(shape, dtype=dtype, device=device)
        if not torch.cuda.is_current_stream_capturing():  # a captured fill never ran
            _rng_states[key] = state
    return state


class Dense:
    """Attention on ``[batch, heads, seq, dim]`` tensors (``seq_dim`` 2)."""

    seq_dim = 2

    def __init__(self, device_type: str) -> None:
        choice = os.environ.get("GSHMEM_ATTENTION_KERNEL", "cudnn").lower()
        if choice not in ("cudnn", "flash"):
            raise UsageError(f"GSHMEM_ATTENTION_KERNEL must be cudnn or flash, got {choice!r}")
        self.kind = choice if device_type == "cuda" else "math"

    def forward(self, q, k, v, causal: bool, scale: float):
        if self.kind == "cudnn":
            r = _ops()._scaled_dot_product_cudnn_attention(
                q, k, v, None, True, 0.0, causal, False, scale=scale
            )
            return r[0], r[1].view(*r[0].shape[:3], 1)
        if self.kind == "flash":
            r = _ops()._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False, scale=scale)
            return r[0], r[1].unsqueeze(-1)
        return math_forward(q, k, v, causal, scale)

    def backward(self, dout, q, k, v, out, lse, causal: bool, scale: float):
        import torch

        sq, sk = q.shape[2], k.shape[2]
        if self.kind == "cudnn":
            seed = _rng_state(q.device, (), torch.int64)
            return _ops()._scaled_dot_product_cudnn_attention_backward(
                dout, q, k, v, out, lse.contiguous(), seed, seed, None, None, None, sq, sk,
                0.0, causal, scale=scale,
            )  # fmt: skip
        if self.kind == "flash":
            rng = _rng_state(q.device, (2,), torch.uint64)
            return _ops()._scaled_dot_product_flash_attention_backward(
                dout, q, k, v, out, lse.squeeze(-1).contiguous(), None, None, sq, sk, 0.0,
                causal, rng, rng[0], scale=scale,
            )  # fmt: skip
        return math_backward(dout, q, k, v, out, lse, causal, scale)


class Varlen:
    """Attention over packed documents, ``[tokens, heads, dim]`` tensors (``seq_dim`` 0); query
    and key blocks share document boundaries ``cu`` (int32, on the tensors' device)."""

    seq_dim = 0

    def __init__(self, device_type: str, cu: torch.Tensor, max_len: int) -> None:
        self.kind = "flash" if device_type == "cuda" else "math"
        self.cu, self.max_len = cu, max_len
        self.bounds = [int(b) for b in cu.tolist()]

    def forward(self, q, k, v, causal: bool, scale: float):
        if self.kind == "flash":
            n = self.max_len
            r = _ops()._flash_attention_forward(
                q, k, v, self.cu, self.cu, n, n, 0.0, causal, False, scale=scale
            )
            return r[0], r[1].t().unsqueeze(-1)
        return self._per_document(lambda a, b: math_forward(*a, causal, scale), (q, k, v))

    def backward(self, dout, q, k, v, out, lse, causal: bool, scale: float):
        import torch

        if self.kind == "flash":
            n = self.max_len
            rng = _rng_state(q.device, (2,), torch.uint64)
            return _ops()._flash_attention_backward(
                dout, q, k, v, out, lse.squeeze(-1).t().contiguous(), self.cu, self.cu, n, n,
                0.0, causal, rng, rng[0], scale=scale,
            )  # fmt: skip
        return self._per_document(
            lambda a, b: math_backward(*a, causal, scale), (dout, q, k, v, out, lse)
        )

    def _per_document(self, fn, tensors):
        """Runs the math kernel on each document (as ``[1, heads, len, dim]``) and packs the
        results back into ``[tokens, heads, *]``."""
        import torch

        pieces = []
        for a, b in zip(self.bounds, self.bounds[1:], strict=False):
            doc = [t[a:b].transpose(0, 1).unsqueeze(0) for t in tensors]
            pieces.append([r[0].transpose(0, 1) for r in fn(doc, (a, b))])
        return tuple(torch.cat(parts, 0) for parts in zip(*pieces, strict=True))


def _groups(q, k) -> int:
    hq, hk = q.shape[-3], k.shape[-3]
    if hq % hk:
        raise UsageError(f"query heads ({hq}) must be a multiple of key/value heads ({hk})")
    return hq // hk


def _scores(q, k, causal: bool, scale: float):
    """fp32-or-wider scores of ``[b, h, sq, d]`` queries against keys with the GQA heads."""
    import torch

    wide = torch.promote_types(q.dtype, torch.float32)
    kk = k.to(wide).repeat_interleave(_groups(q, k), -3)
    s = q.to(wide) @ kk.transpose(-1, -2) * scale
    if causal:
        sq, sk = s.shape[-2:]
        s = s.masked_fill(torch.ones(sq, sk, dtype=torch.bool, device=s.device).triu(1), -torch.inf)
    return s


def math_forward(q, k, v, causal: bool, scale: float):
    """Exact attention (fp32 or wider) on ``[b, h, s, d]`` tensors: (output in q's dtype, lse)."""
    import torch

    s = _scores(q, k, causal, scale)
    lse = torch.logsumexp(s, -1, keepdim=True)
    p = torch.exp(s - lse).nan_to_num(0.0)
    out = p @ v.to(s.dtype).repeat_interleave(_groups(q, k), -3)
    return out.to(q.dtype), lse.float()


def math_backward(dout, q, k, v, out, lse, causal: bool, scale: float):
    """Gradients of exact attention given the final output and lse of each query row."""
    g = _groups(q, k)
    s = _scores(q, k, causal, scale)
    wide = s.dtype
    p = (s - lse.to(wide)).exp().nan_to_num(0.0)
    do, vv = dout.to(wide), v.to(wide).repeat_interleave(g, -3)
    dv = p.transpose(-1, -2) @ do
    ds = p * (do @ vv.transpose(-1, -2) - (do * out.to(wide)).sum(-1, keepdim=True))
    dq = ds @ k.to(wide).repeat_interleave(g, -3) * scale
    dk = ds.transpose(-1, -2) @ q.to(wide) * scale

    def fold(x):  # sum the query heads of each key head
        b, h, n, d = x.shape
        return x.view(b, h // g, g, n, d).sum(2)

    return dq.to(q.dtype), fold(dk).to(k.dtype), fold(dv).to(v.dtype)


__all__ = ["Dense", "Varlen", "math_backward", "math_forward"]
