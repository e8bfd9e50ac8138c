"""Synthetic training data: token sequences whose loss can fall only through long-range
attention. Each sequence is a random block of ``period`` tokens repeated: the first copy is
noise (log(vocab) nats per token), every later token is the one ``period`` positions back, which
a model learns to copy (an induction head). Labels are the next tokens; the last has none."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from gshmem.train.loss import IGNORE


def next_token_labels(tokens: torch.Tensor) -> torch.Tensor:
    """labels[..., i] = tokens[..., i + 1]; the last position is IGNORE."""
    labels = torch.full_like(tokens, IGNORE)
    labels[..., :-1] = tokens[..., 1:]
    return labels


Batch = tuple[torch.Tensor, torch.Tensor]  # (tokens, labels)


def repeated_blocks(
    vocab: int, seq: int, batch: int, period: int, seed: int = 0, device: str = "cpu"
) -> Iterator[Batch]:
    """Endless (tokens [batch, seq], labels) batches, the same on every rank for one seed."""
    if not 0 < period <= seq:
        raise ValueError(f"period must be in 1..seq ({seq}), got {period}")
    g = torch.Generator().manual_seed(seed)
    while True:
        base = torch.randint(0, vocab, (batch, period), generator=g)
        tokens = base.repeat(1, -(-seq // period))[:, :seq].to(device)
        yield tokens, next_token_labels(tokens)


def ideal_loss(vocab: int, seq: int, period: int) -> float:
    """The mean loss of a model that copies perfectly: the labels of positions 0 .. period - 2
    are tokens of the first copy (log(vocab) nats each), every later one is a copy (0)."""
    import math

    return min(period - 1, seq - 1) * math.log(vocab) / (seq - 1)


__all__ = ["ideal_loss", "next_token_labels", "repeated_blocks"]
