"""Cross-entropy through the output layer a chunk of tokens at a time, each chunk's logits
recomputed in the backward: the [tokens, vocab] logits (128K x 128256 x 4 B = 64 GiB at 128K
tokens) never exist at once."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

IGNORE = -100  # labels that count for nothing (the last token of a sequence has no next)


def _chunk_loss(h: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    logits = F.linear(h, weight)
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # 16-bit: in fp32
    return F.cross_entropy(logits, labels, ignore_index=IGNORE, reduction="sum")


def chunked_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor,
                          chunk: int = 4096) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """(sum of the token losses, number of counted tokens) of ``hidden`` [..., H] through
    ``weight`` [V, H] against ``labels`` [...]: sums, so that context-parallel ranks add theirs
    before dividing."""
    h, y = hidden.reshape(-1, hidden.shape[-1]), labels.reshape(-1)
    total = hidden.new_zeros((), dtype=torch.promote_types(hidden.dtype, torch.float32))
    for a in range(0, h.shape[0], chunk):
        total = total + checkpoint(_chunk_loss, h[a : a + chunk], weight, y[a : a + chunk],
                                   use_reentrant=False)  # fmt: skip
    return total, (y != IGNORE).sum()


__all__ = ["IGNORE", "chunked_cross_entropy"]
