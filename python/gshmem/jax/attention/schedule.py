"""Ring attention's schedule as one SPMD program: at step s every rank holds the K/V shard of
rank (me - s) mod W (it moves one rank per step), and every rank's program must have the same
shapes whatever its rank. The PyTorch schedule (gshmem.attention.schedule) picks, at a causal
zigzag step, "all queries x front keys" on ranks after the source and "back queries x all keys"
on ranks before it: the same work in different shapes. Here both become two half x half blocks,
one common to every rank and one whose halves a rank selects by where the source is:

* zigzag, causal, step 0: the local shard against itself, causal;
* zigzag, causal, step s > 0: back queries x front keys (every rank), and SELECT x SELECT: the
  front halves where the source comes before this rank, the back halves where it comes after;
* contiguous, causal: step 0 causal; later steps all x all, kept only where the source comes
  before this rank (masked off elsewhere: the layout is unbalanced anyway);
* not causal: all x all at every step.
"""

from __future__ import annotations

from dataclasses import dataclass

from gshmem.attention.layout import check_layout

ALL, FRONT, BACK, SELECT = "all", "front", "back", "select"


@dataclass(frozen=True)
class Block:
    """Queries of part ``q`` against keys of part ``kv``; ``causal``: lower-triangular mask of
    equal parts; ``if_source_before``: kept only on ranks the shard's source precedes."""

    q: str
    kv: str
    causal: bool = False
    if_source_before: bool = False


def step_blocks(step: int, world: int, layout: str, causal: bool) -> tuple[Block, ...]:
    """The blocks every rank computes at ``step`` (0 <= step < world)."""
    check_layout(layout)
    if not 0 <= step < world:
        raise ValueError(f"step {step} outside a ring of {world}")
    if not causal:
        return (Block(ALL, ALL),)
    if step == 0:
        return (Block(ALL, ALL, causal=True),)
    if layout == "contiguous":
        return (Block(ALL, ALL, if_source_before=True),)
    return (Block(BACK, FRONT), Block(SELECT, SELECT))


def source_before(step: int, rank):
    """Whether the shard held at ``step`` comes from a rank before ``rank`` (step > 0; ``rank``
    may be traced): its source is rank - step, which wraps past 0 exactly when step > rank."""
    return step <= rank


def part_range(part: str, length: int, front: bool | None = None) -> tuple[int, int]:
    """[start, stop) of ``part`` in a shard of ``length`` tokens (SELECT: the front half when
    ``front`` else the back half)."""
    half = length // 2
    if part == SELECT:
        part = FRONT if front else BACK
    return {ALL: (0, length), FRONT: (0, half), BACK: (half, length)}[part]


__all__ = ["ALL", "BACK", "FRONT", "SELECT", "Block", "part_range", "source_before", "step_blocks"]
