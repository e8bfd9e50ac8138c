"""The all-gather schedule: which K/V each rank gathers, where it puts it, and which blocks it
computes — the alternative to the ring (schedule.py) when calls are short.

The ring runs W steps of one block each, and every cuDNN call carries per-call work (the dO·O
row sums, the dq conversion, the GQA head reduction) over its whole query rows: at a few
thousand tokens per GPU that work and the W merges cost 10-20 % of the call
(docs/attention.md). Here every rank instead gathers, at the start, the K/V halves its queries
attend to *without* a mask, while it computes its own shard against itself (the one masked
block); then each query part attends to its gathered keys in one unmasked call. Three calls
at most, whatever W is, and only the diagonal block is masked.

Unmasked attention does not care about the order of its keys, so a reader's gathered buffer is
laid out so that every query part's keys are a *prefix* of it (the parts' key sets nest). In
half-shards (a zigzag shard is the halves ``front`` = chunk r and ``back`` = chunk 2W-1-r of
2W chunks), reader p gathers, causal zigzag:

    [front of 0, ..., front of p-1] [all of p+1] ... [all of W-1]
     <- p halves: p's front queries ->
     <- 2W-2-p halves: p's back queries ---------------------------->

(the back queries also see every earlier chunk but p's own front, which the diagonal block
covers). Contiguous causal: the whole shards of ranks 0..p-1. Not causal: every other shard.
Each writer therefore puts one contiguous run of its shard (its front half or all of it) to
each reader, and in the backward the reader returns that run's key/value gradients to it.

Memory: a reader holds up to 2W-2 halves of K/V (W-1 shards), against two shards for the ring;
``algorithm.choose`` keeps the ring where that is large.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from gshmem.attention.layout import check_layout
from gshmem.attention.schedule import ALL, BACK, FRONT, halves


@dataclass(frozen=True)
class Region:
    """Part ``part`` (``all`` or ``front``) of rank ``owner``'s K/V shard, gathered by rank
    ``reader`` at ``at`` half-shards into its buffer."""

    owner: int
    part: str
    reader: int
    at: int


def _gathered(reader: int, world: int, layout: str, causal: bool) -> list[tuple[int, str]]:
    """(owner, part) in the order reader ``reader`` lays them out."""
    if not causal:
        return [(s, ALL) for s in range(world) if s != reader]
    if layout == "contiguous":
        return [(s, ALL) for s in range(reader)]
    return [(s, FRONT) for s in range(reader)] + [(s, ALL) for s in range(reader + 1, world)]


@functools.cache
def regions(world: int, layout: str, causal: bool) -> tuple[Region, ...]:
    """Every region of the schedule, by reader then position (the order both ends of a
    transfer list them in)."""
    check_layout(layout)
    out = []
    for reader in range(world):
        at = 0
        for owner, part in _gathered(reader, world, layout, causal):
            out.append(Region(owner, part, reader, at))
            at += len(halves(part))
    return tuple(out)


def gathered_halves(rank: int, world: int, layout: str, causal: bool) -> int:
    """How many half-shards rank ``rank`` gathers."""
    return sum(len(halves(part)) for _, part in _gathered(rank, world, layout, causal))


@functools.cache
def prefix_blocks(rank: int, world: int, layout: str, causal: bool) -> tuple[tuple[str, int], ...]:
    """The unmasked blocks of rank ``rank``: (query part, half-shards of the gathered buffer it
    attends to, from the start), the longest last. The masked block, the local shard against
    itself (``causal``), comes on top of these."""
    check_layout(layout)
    if not causal or layout == "contiguous":
        n = gathered_halves(rank, world, layout, causal)
        return ((ALL, n),) if n else ()
    front, back = rank, 2 * world - 2 - rank
    if front == back:
        return ((ALL, front),) if front else ()
    return tuple((part, n) for part, n in ((FRONT, front), (BACK, back)) if n)


@functools.cache
def contributions(owner: int, world: int, layout: str, causal: bool) -> tuple[tuple, ...]:
    """The key/value gradients the backward returns to ``owner``: (writer, the writer's block
    length n, the part of ``owner``'s shard), one per unmasked block that read that part, in
    receive-slot order: whole-shard parts first. The front half of the shard then sums slots
    [0, all of them), the back half [0, the whole-shard ones) (``sum_slots``)."""
    out = []
    for r in regions(world, layout, causal):
        if r.owner != owner:
            continue
        for _, n in prefix_blocks(r.reader, world, layout, causal):
            if n <= r.at:
                continue
            if n < r.at + len(halves(r.part)):
                raise AssertionError(f"a block of {n} halves splits region {r}")
            out.append((r.reader, n, r.part))
    return tuple(sorted(out, key=lambda c: c[2] != ALL))  # stable: whole shards first


def sum_slots(owner: int, world: int, layout: str, causal: bool) -> dict[str, tuple[int, int]]:
    """Per half of ``owner``'s shard: the [first, last) receive slots that add up to its key/
    value gradients (every part is the whole shard or its front half, so both are runs)."""
    parts = [c[2] for c in contributions(owner, world, layout, causal)]
    return {FRONT: (0, len(parts)), BACK: (0, parts.count(ALL))}


def max_slots(world: int, layout: str, causal: bool) -> int:
    """The most receive slots any rank needs (every rank's mailbox has that many)."""
    return max(len(contributions(r, world, layout, causal)) for r in range(world))


__all__ = [
    "Region",
    "contributions",
    "gathered_halves",
    "max_slots",
    "prefix_blocks",
    "regions",
    "sum_slots",
]
