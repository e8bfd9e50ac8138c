"""Model FLOPs of a training step, counted as MaxText does: every matmul's 2 FLOPs per
multiply-add, forward + backward = 3 x forward, attention's score and value products included
(halved under a causal mask). The recomputation of activation checkpointing is not counted:
these are *model* FLOPs, the numerator of MFU."""

from __future__ import annotations

from gshmem.train.config import LlamaConfig


def train_flops(cfg: LlamaConfig, batch: int, seq: int, causal: bool = True) -> float:
    """FLOPs of one forward + backward over ``batch`` sequences of ``seq`` tokens."""
    tokens = batch * seq
    ffn = 2 * tokens * cfg.hidden * cfg.ffn * 3  # gate, up, down
    qkv = 2 * tokens * cfg.hidden * (cfg.heads + 2 * cfg.kv_heads) * cfg.head_dim
    out_proj = 2 * tokens * cfg.heads * cfg.head_dim * cfg.hidden
    attention = 4 * batch * seq * seq * cfg.heads * cfg.head_dim * (0.5 if causal else 1.0)
    output_layer = 2 * tokens * cfg.hidden * cfg.vocab
    return 3.0 * (cfg.layers * (ffn + qkv + out_proj + attention) + output_layer)


__all__ = ["train_flops"]
