"""The Llama 3 architecture in plain PyTorch: RMSNorm, rotary position embedding at given token
positions (so a context-parallel shard embeds its own tokens' places), grouped-query attention
through an injected ``attend`` (SDPA on one GPU, ``gshmem.attention.ring_attention`` under CP),
SwiGLU, an untied output layer. ``forward`` returns the final hidden states; ``output``, a
module of its own (so that FSDP gathers its weight for it), turns them into the loss chunk by
chunk (loss.py)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from gshmem.train.config import LlamaConfig
from gshmem.train.loss import chunked_cross_entropy

# attend(q, k, v): [B, heads, S, D], [B, kv_heads, S, D] x2 -> [B, heads, S, D], causal
Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal attention on one device (no context parallelism)."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotary embedding of x [B, S, H, D] at ``positions`` [S] (pairs (i, i + D/2) rotate)."""
    d, wide = x.shape[-1], torch.promote_types(x.dtype, torch.float32)  # 16-bit: in fp32
    inv = theta ** (-torch.arange(0, d, 2, device=x.device, dtype=wide) / d)
    angle = positions.to(wide)[:, None] * inv[None, :]  # [S, D/2]
    cos, sin = (t[None, :, None, :] for t in (angle.cos(), angle.sin()))
    a, b = x.to(wide).chunk(2, dim=-1)
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1).to(x.dtype)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(dim)), eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(
            x.dtype
        ) * self.weight


class Attention(nn.Module):
    """The attention's projections around an injected ``attend`` (Block calls the two sides)."""

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.q = nn.Linear(cfg.hidden, cfg.heads * cfg.head_dim, bias=False)
        self.kv = nn.Linear(cfg.hidden, 2 * cfg.kv_heads * cfg.head_dim, bias=False)
        self.out = nn.Linear(cfg.heads * cfg.head_dim, cfg.hidden, bias=False)

    def qkv(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """q, k, v of ``x`` [B, S, hidden] in SDPA layout (K/V not expanded), rotated."""
        c, (b, s, _) = self.cfg, x.shape
        q = self.q(x).view(b, s, c.heads, c.head_dim)
        k, v = self.kv(x).view(b, s, 2, c.kv_heads, c.head_dim).unbind(2)
        q, k = rope(q, positions, c.rope_theta), rope(k, positions, c.rope_theta)
        return tuple(t.transpose(1, 2) for t in (q, k, v))

    def project_out(self, o: torch.Tensor) -> torch.Tensor:
        """The output projection of the attention output ``o`` [B, heads, S, head_dim]."""
        b, _, s, _ = o.shape
        return self.out(o.transpose(1, 2).reshape(b, s, self.cfg.heads * self.cfg.head_dim))


class MLP(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.gate_up = nn.Linear(cfg.hidden, 2 * cfg.ffn, bias=False)
        self.down = nn.Linear(cfg.ffn, cfg.hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(F.silu(gate) * up)


class Block(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.attn_norm, self.attn = RMSNorm(cfg.hidden, cfg.norm_eps), Attention(cfg)
        self.mlp_norm, self.mlp = RMSNorm(cfg.hidden, cfg.norm_eps), MLP(cfg)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, attend: Attend,
                keep_attention: bool = False) -> torch.Tensor:  # fmt: skip
        """``keep_attention``: recompute in the backward everything but the attention, whose
        inputs, output and log-sum-exp stay (the projections, norms and MLP are recomputed;
        the attention, most of a long sequence's FLOPs, is not). Inside ``forward`` so that
        FSDP's hooks around the block run as for any call."""
        if not keep_attention:
            return self.after_attention(x, attend(*self.before_attention(x, positions)))
        q, k, v = ckpt(self.before_attention, x, positions)
        return ckpt(self.after_attention, x, attend(q, k, v))

    def before_attention(self, x: torch.Tensor,
                         positions: torch.Tensor) -> tuple[torch.Tensor, ...]:  # fmt: skip
        """The norm, projections and rotation that make the attention's q, k, v."""
        return self.attn.qkv(self.attn_norm(x), positions)

    def after_attention(self, x: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        """The output projection of the attention output ``o``, the residual adds and the MLP."""
        x = x + self.attn.project_out(o)
        return x + self.mlp(self.mlp_norm(x))


def ckpt(fn, *args):
    """``fn(*args)`` recomputed in the backward (non-reentrant activation checkpointing)."""
    return torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=False)


class Output(nn.Module):
    """The untied output layer and the loss: (loss sum, counted tokens) of hidden states
    against next-token labels (loss.py)."""

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.proj = nn.Linear(cfg.hidden, cfg.vocab, bias=False)

    def forward(self, hidden: torch.Tensor, labels: torch.Tensor, chunk: int = 4096):
        return chunked_cross_entropy(hidden, self.proj.weight, labels, chunk)


class Llama(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.hidden)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.hidden, cfg.norm_eps)
        self.output = Output(cfg)  # untied from the embedding

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, attend: Attend = sdpa,
                checkpoint: bool = False, keep_attention: int = 0) -> torch.Tensor:  # fmt: skip
        """Final hidden states [B, S, hidden] of ``tokens`` [B, S] at ``positions`` [S];
        ``checkpoint``: recompute each block in the backward (activation checkpointing), except
        the attention of the first ``keep_attention`` blocks (Block.forward), which keep
        its inputs, output and log-sum-exp instead: more memory, fewer FLOPs."""
        x = self.embed(tokens)
        for i, block in enumerate(self.blocks):
            if checkpoint and i < keep_attention:
                x = block(x, positions, attend, keep_attention=True)
            elif checkpoint:
                x = ckpt(block, x, positions, attend)
            else:
                x = block(x, positions, attend)
        return self.norm(x)

    def compile_blocks(self, **options) -> None:
        """``torch.compile`` every block's pieces around its attention (before_attention: norm,
        projections, RoPE; after_attention: output projection, residuals, norm, SwiGLU), each
        as one graph (``fullgraph``), so their elementwise work fuses. The attention itself,
        the caller's ``attend`` (gshmem's ring, the NCCL ring, SDPA), stays eager, as do the
        checkpoints and FSDP's hooks around the pieces. ``options`` go to ``torch.compile``."""
        for block in self.blocks:
            for name in ("before_attention", "after_attention"):
                setattr(block, name, torch.compile(getattr(block, name), fullgraph=True,
                                                   **options))  # fmt: skip


__all__ = ["Attend", "Llama", "Output", "rope", "sdpa"]
