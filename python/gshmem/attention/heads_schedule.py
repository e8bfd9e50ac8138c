"""The head-parallel schedule (``algorithm="heads"``): which heads each rank computes and which
token runs move where — the all-to-all alternative to passing K/V around (as in
DeepSpeed-Ulysses).

Every rank holds a shard of the sequence for every head. The head-parallel schedule swaps that
for the whole sequence of ``heads / W`` heads: an all-to-all sends each rank's tokens of rank
p's heads to rank p, which then runs *one* attention call over the whole sequence — the same
kernel, mask and work as one GPU on the whole sequence, divided by W, with no merges and no
per-step helpers — and a second all-to-all returns each token's output to its owner. The
backward does the same with the output's gradient and the three input gradients, each computed
once by the kernel: nothing is summed across ranks.

A shard in either layout is a few runs of consecutive positions (zigzag: its front and back
halves; contiguous: one run), so each (tensor, batch, run, peer) moves as one strided 2-D copy
from the shard's heads to the run's place in the peer's whole sequence. With the zigzag
layout's back halves stored in reverse rank order the gathered sequence is in global order, so
the kernel's causal mask applies unchanged.

GQA: query heads ``[p h, (p+1) h)`` use key heads ``[p hk, (p+1) hk)`` when kv heads divide
by W (``h = heads / W``, ``hk = kv_heads / W``), so both tensors split by the same rule.
"""

from __future__ import annotations

from gshmem._errors import UsageError
from gshmem.attention.layout import token_index


def runs(length: int, world: int, rank: int, layout: str) -> list[tuple[int, int, int]]:
    """(first local token, first global position, tokens) of each run of consecutive global
    positions in rank ``rank``'s shard of ``length`` local tokens, in local order."""
    pos = token_index(length * world, world, rank, layout)
    out: list[tuple[int, int, int]] = []
    for i, g in enumerate(pos):
        if out and out[-1][1] + out[-1][2] == g:
            a, b, n = out[-1]
            out[-1] = (a, b, n + 1)
        else:
            out.append((i, g, 1))
    return out


def head_range(rank: int, world: int, heads: int) -> tuple[int, int]:
    """The heads ``[a, b)`` that rank ``rank`` computes (``heads`` divides by ``world``)."""
    n = heads // world
    return rank * n, (rank + 1) * n


def check_heads(world: int, heads: int, kv_heads: int) -> None:
    """A UsageError unless both head counts divide by the team size."""
    if heads % world or kv_heads % world:
        raise UsageError(
            f"ring_attention: algorithm='heads' splits the heads over the team: {heads} query "
            f"and {kv_heads} key/value heads must both divide by {world}; use 'ring' or "
            "'allgather'"
        )


__all__ = ["check_heads", "head_range", "runs"]
