"""The ring schedule: at each step, which query rows attend to which key rows, and how.

At step s (0 <= s < W) rank r holds the K/V shard that started on rank ``(r - s) mod W`` (its
*source*) and computes one or more blocks of attention between parts of its own queries and
parts of that shard. A part is the whole local shard or, in the zigzag layout, its front or back
half (layout.py). Under a causal mask (positions as in layout.py):

* zigzag, step 0: the local shard against itself, causal (front before back holds globally);
* zigzag, source < r: all queries against the source's front half, unmasked (every query comes
  after it; the source's back half comes after every query);
* zigzag, source > r: the back half of the queries against the whole source shard, unmasked
  (the front half of the queries comes before all of it);
* contiguous: source == r causal, source < r unmasked, source > r nothing.

Every step then does the same work on every rank in the zigzag layout. Packed documents
(``split=True``) need blocks made only of halves, because only then is each document's slice a
run of equal-length segments that a variable-length kernel takes: the same coverage, written as
front/back pairs.
"""

from __future__ import annotations

from dataclasses import dataclass

from gshmem.attention.layout import check_layout

ALL, FRONT, BACK = "all", "front", "back"


@dataclass(frozen=True)
class Block:
    """Queries of part ``q`` attend to keys of part ``kv``; ``causal``: with the lower-triangular
    mask of equal-length parts (otherwise unmasked)."""

    q: str
    kv: str
    causal: bool


def source(rank: int, world: int, step: int) -> int:
    """The rank whose K/V shard rank ``rank`` holds at ``step`` (shards move to rank + 1)."""
    return (rank - step) % world


def step_blocks(
    rank: int, world: int, step: int, layout: str, causal: bool, split: bool = False
) -> tuple[Block, ...]:
    """The blocks rank ``rank`` computes at ``step`` (possibly none)."""
    check_layout(layout)
    src = source(rank, world, step)
    if layout == "contiguous":
        if not causal or src < rank:
            return (Block(ALL, ALL, False),)
        return (Block(ALL, ALL, True),) if src == rank else ()
    if not causal:
        blocks = (Block(ALL, ALL, False),)
    elif step == 0:
        blocks = (Block(ALL, ALL, True),)
    elif src < rank:
        blocks = (Block(ALL, FRONT, False),)
    else:
        blocks = (Block(BACK, ALL, False),)
    return tuple(b for blk in blocks for b in _halves(blk)) if split else blocks


def _halves(b: Block) -> tuple[Block, ...]:
    """``b`` as blocks between halves only (same coverage)."""
    if b.causal:  # the diagonal: front|back against front|back under the causal mask
        return (Block(FRONT, FRONT, True), Block(BACK, FRONT, False), Block(BACK, BACK, True))
    qs = (FRONT, BACK) if b.q == ALL else (b.q,)
    kvs = (FRONT, BACK) if b.kv == ALL else (b.kv,)
    return tuple(Block(q, kv, False) for q in qs for kv in kvs)


def halves(part: str) -> tuple[str, ...]:
    """The halves a part is made of."""
    return (FRONT, BACK) if part == ALL else (part,)


def blocks_per_half(
    rank: int, world: int, layout: str, causal: bool, split: bool = False
) -> dict[str, int]:
    """How many blocks of the whole ring reach each half of rank ``rank``'s query rows."""
    count = {FRONT: 0, BACK: 0}
    for s in range(world):
        for b in step_blocks(rank, world, s, layout, causal, split):
            for h in halves(b.q):
                count[h] += 1
    return count


def part_range(part: str, length: int) -> tuple[int, int]:
    """[start, stop) of ``part`` in a local shard of ``length`` tokens."""
    half = length // 2
    return {ALL: (0, length), FRONT: (0, half), BACK: (half, length)}[part]


__all__ = [
    "ALL",
    "BACK",
    "FRONT",
    "Block",
    "blocks_per_half",
    "halves",
    "part_range",
    "source",
    "step_blocks",
]
