"""The model's shape: Llama-3-8B's by default (Dubey et al., "The Llama 3 Herd of Models")."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class LlamaConfig:
    layers: int = 32
    hidden: int = 4096
    heads: int = 32
    kv_heads: int = 8
    head_dim: int = 128
    ffn: int = 14336  # SwiGLU inner width
    vocab: int = 128256
    rope_theta: float = 500000.0
    norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        if self.heads % self.kv_heads:
            raise ValueError(f"kv_heads ({self.kv_heads}) must divide heads ({self.heads})")
        if self.head_dim % 2:
            raise ValueError(f"RoPE needs an even head_dim, got {self.head_dim}")

    def with_layers(self, layers: int) -> LlamaConfig:
        return replace(self, layers=layers)

    def matmul_params(self) -> int:
        """Weights every token multiplies by (the embedding lookup is not a matmul)."""
        attn = self.hidden * (self.heads + 2 * self.kv_heads) * self.head_dim
        attn += self.heads * self.head_dim * self.hidden
        return self.layers * (attn + 3 * self.hidden * self.ffn) + self.vocab * self.hidden


LLAMA3_8B = LlamaConfig()


def tiny(layers: int = 2, vocab: int = 256) -> LlamaConfig:
    """A model small enough for CPU tests, with the 8B's head ratio (4 query per KV head)."""
    return LlamaConfig(layers=layers, hidden=64, heads=8, kv_heads=2, head_dim=8, ffn=128,
                       vocab=vocab, rope_theta=10000.0)  # fmt: skip


__all__ = ["LLAMA3_8B", "LlamaConfig", "tiny"]
