"""Context parallelism's split of a batch: each rank keeps its shard of the tokens and of their
next-token labels (labels are made on the whole sequence first, so a shard's last token keeps
its real next token) and the tokens' global positions for RoPE, in the ring's layout."""

from __future__ import annotations

import torch

from gshmem.attention.layout import token_index


def shard_batch(
    tokens: torch.Tensor, labels: torch.Tensor, world: int, rank: int, layout: str = "zigzag"
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(tokens, labels, positions) of ``rank``'s shard of ``tokens``/``labels`` [B, S]."""
    index = torch.tensor(token_index(tokens.shape[-1], world, rank, layout), device=tokens.device)
    return tokens[..., index], labels[..., index], index


__all__ = ["shard_batch"]
