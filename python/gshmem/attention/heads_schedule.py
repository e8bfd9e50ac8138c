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

import functools
import os

from gshmem._errors import UsageError
from gshmem.attention.layout import check_layout


@functools.lru_cache(maxsize=256)
def runs(length: int, world: int, rank: int, layout: str) -> tuple[tuple[int, int, int], ...]:
    """(first local token, first global position, tokens) of each run of consecutive global
    positions in rank ``rank``'s shard of ``length`` local tokens, in local order: zigzag, its
    chunks ``rank`` and ``2 world - 1 - rank`` of ``length / 2`` (one run where they meet, on
    the last rank); contiguous, chunk ``rank``."""
    check_layout(layout)
    if layout == "contiguous" or world == 1:
        return ((0, rank * length, length),)
    half = length // 2
    front, back = rank * half, (2 * world - 1 - rank) * half
    if front + half == back:
        return ((0, front, length),)
    return ((0, front, half), (half, back, half))


def head_range(rank: int, world: int, heads: int, chunk: int = 0,
               chunks: int = 1) -> tuple[int, int]:  # fmt: skip
    """The heads ``[a, b)`` of chunk ``chunk`` of the ``chunks`` that rank ``rank`` computes
    (``heads`` divides by ``world`` x ``chunks``)."""
    n = heads // world // chunks
    start = rank * (heads // world) + chunk * n
    return start, start + n


def chunk_count(world: int, kv_heads: int) -> int:
    """How many chunks of heads a pass moves and computes in turn (each chunk's all-to-all
    overlapping the previous chunk's kernel): ``GSHMEM_ATTENTION_HEAD_CHUNKS`` (a divisor of
    the key/value heads per rank), else 1. Measured on 2 x H200 (docs/attention.md), more
    chunks were slower at every size: a chunk's backward kernel has 1/chunks of the key/value
    heads to spread over the SMs, and each chunk costs the host a round of puts."""
    per_rank = kv_heads // world
    want = os.environ.get("GSHMEM_ATTENTION_HEAD_CHUNKS", "1")
    if not want.isdigit() or int(want) < 1 or per_rank % int(want):
        raise UsageError(f"GSHMEM_ATTENTION_HEAD_CHUNKS must be a positive divisor of the "
                         f"{per_rank} key/value heads per rank, got {want!r}")  # fmt: skip
    return int(want)


def check_heads(world: int, heads: int, kv_heads: int) -> None:
    """A UsageError unless both head counts divide by the team size."""
    if heads % world or kv_heads % world:
        raise UsageError(
            f"ring_attention: algorithm='heads' splits the heads over the team: {heads} query "
            f"and {kv_heads} key/value heads must both divide by {world}; use 'ring' or "
            "'allgather'"
        )


__all__ = ["check_heads", "chunk_count", "head_range", "runs"]
