"""Real text to train on with no download: the Python language reference that every CPython
ships (``pydoc_data.topics``, ~450 KB of English prose and grammar), tokenised as UTF-8 bytes
(vocabulary 256: the tokenizer is the codec Python ships). Batches are windows at random offsets,
the same on every rank for one seed; labels are each window's next bytes."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from gshmem.train.data import Batch

BYTE_VOCAB = 256


def corpus() -> str:
    """The language reference's topics, in a fixed order."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[name] for name in sorted(topics))


def encode(text: str) -> torch.Tensor:
    """Token ids of ``text``: its UTF-8 bytes."""
    return torch.frombuffer(bytearray(text.encode("utf-8")), dtype=torch.uint8).long()


def decode(tokens: torch.Tensor) -> str:
    return bytes(tokens.to(torch.uint8).tolist()).decode("utf-8", errors="replace")


def text_windows(seq: int, batch: int, seed: int = 0) -> Iterator[Batch]:
    """Endless (tokens [batch, seq], labels [batch, seq]) windows of the corpus; labels[i] is
    the byte after tokens[i] (every position has one)."""
    ids = encode(corpus())
    if seq + 1 > ids.numel():
        raise ValueError(f"seq ({seq}) must be below the corpus' {ids.numel()} bytes")
    g = torch.Generator().manual_seed(seed)
    while True:
        starts = torch.randint(0, ids.numel() - seq, (batch,), generator=g)
        rows = torch.stack([ids[s : s + seq + 1] for s in starts.tolist()])
        yield rows[:, :-1], rows[:, 1:]


__all__ = ["BYTE_VOCAB", "corpus", "decode", "encode", "text_windows"]
