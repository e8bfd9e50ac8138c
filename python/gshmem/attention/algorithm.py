"""Which schedule a ``ring_attention`` call runs: the ring (schedule.py, ring.py), the
all-gather (gather_schedule.py, gather.py) or the head-parallel all-to-all (heads_schedule.py,
heads.py). ``auto`` takes the all-gather while a rank's gathered K/V stays small, else the
ring; ``GSHMEM_ATTENTION_ALGORITHM`` may name one for ``auto`` calls."""

from __future__ import annotations

import os

from gshmem._errors import UsageError
from gshmem.attention.heads_schedule import check_heads

ALGORITHMS = ("auto", "ring", "allgather", "heads")
# auto gathers while a reader's gathered K/V stays this small (bytes; docs/attention.md: measured)
GATHER_MAX_BYTES = 512 << 20


def choose(requested: str, world: int, seq: int, varlen: bool, kv_bytes: int,
           heads: tuple[int, int] | None = None, gather_from: int = 2) -> str:  # fmt: skip
    """ "ring", "allgather" or "heads" for a call asking for ``requested`` (one of ALGORITHMS).
    ``seq``: local tokens; ``kv_bytes``: this rank's K and V bytes; ``heads``: (query heads,
    key/value heads), None where the head-parallel schedule is not available. Packed documents
    and odd shards take the ring; auto gathers from ``gather_from`` ranks on, while a reader's
    K/V (W-1 shards) stays within GATHER_MAX_BYTES. An explicit choice that cannot run is a
    UsageError."""
    if requested not in ALGORITHMS:
        raise UsageError(
            f"ring_attention: algorithm must be one of {ALGORITHMS}, got {requested!r}"
        )
    if requested == "auto":
        requested = os.environ.get("GSHMEM_ATTENTION_ALGORITHM", "auto").lower()
        if requested not in ALGORITHMS:
            raise UsageError(f"GSHMEM_ATTENTION_ALGORITHM must be one of {ALGORITHMS}, "
                             f"got {requested!r}")  # fmt: skip
    if varlen and requested in ("allgather", "heads"):
        raise UsageError(f"ring_attention: algorithm={requested!r} does not take packed "
                         "documents (cu_seqlens); use the ring")  # fmt: skip
    if requested == "heads":
        if heads is None:
            raise UsageError("ring_attention: algorithm='heads' is not available here; use "
                             "'ring' or 'allgather'")  # fmt: skip
        check_heads(world, *heads)
        return "heads" if world > 1 else "ring"
    if requested == "allgather" and seq % 2:
        raise UsageError(f"ring_attention: algorithm='allgather' needs an even local length, "
                         f"got {seq}")  # fmt: skip
    able = world > 1 and not varlen and seq % 2 == 0
    if requested == "auto":
        fits = (world - 1) * kv_bytes <= GATHER_MAX_BYTES
        return "allgather" if able and world >= gather_from and fits else "ring"
    return "allgather" if requested == "allgather" and able else "ring"


__all__ = ["ALGORITHMS", "GATHER_MAX_BYTES", "choose"]
