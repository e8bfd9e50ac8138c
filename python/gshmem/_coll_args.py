"""Argument conversion for the collectives (Comm.all_reduce, all_gather, ...): tensors and their
dtype codes, outputs, reduction operators, teams, all_to_allv counts and displacements. Every bad
argument raises UsageError here, before anything reaches the native library."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from gshmem import _C
from gshmem._errors import UsageError
from gshmem._scalars import as_count
from gshmem._stream_args import span
from gshmem.team import Team


def coll_tensor(t: Any, name: str, device: int) -> tuple[int, int, int]:
    """(gshmem dtype code, element count, address) of a contiguous tensor on cuda:``device``."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(t, torch.Tensor):
        raise UsageError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    code = _C.COLL_DTYPES.get(str(t.dtype).removeprefix("torch."))
    if code is None:
        names = ", ".join(_C.COLL_DTYPES)
        raise UsageError(f"{name} is {t.dtype}; collectives take {names}")
    span(t, name, device)  # device and contiguity
    return int(code), t.numel(), t.data_ptr()


def coll_out(out: Any, t: Any, count: int, op: str) -> None:
    """``out`` is a tensor like ``t`` (dtype, device, contiguous) of ``count`` elements."""
    _, have, _ = coll_tensor(out, f"{op}: out", t.device.index)
    if out.dtype != t.dtype:
        raise UsageError(f"{op}: out is {out.dtype} but t is {t.dtype}; they must match")
    if have != count:
        raise UsageError(f"{op}: out has {have} elements; it must have {count}")


def redop_code(op: object) -> int:
    """ "sum", "prod", "min", "max" (any case) -> GSHMEM_SUM/PROD/MIN/MAX."""
    key = op.lower() if isinstance(op, str) else None
    if key not in _C.COLL_REDOPS:
        names = ", ".join(repr(k) for k in _C.COLL_REDOPS)
        raise UsageError(f"op must be one of {names}, got {op!r}")
    return int(_C.COLL_REDOPS[key])


def team_checked(team: Any) -> Team:
    if not isinstance(team, Team):
        raise UsageError(f"team must be a gshmem.Team or None, got {type(team).__name__}")
    return team


def team_arg(team: Any) -> tuple[int, int, int, int] | None:
    return None if team is None else team_checked(team)._tuple()


def checked_counts(values: Sequence[int], n: int, name: str) -> list[int]:
    counts = [as_count(v, f"all_to_allv: {name}[{i}]") for i, v in enumerate(values)]
    if len(counts) != n:
        raise UsageError(f"all_to_allv: {name} has {len(counts)} entries; the team has {n} PEs")
    if any(c < 0 for c in counts):
        raise UsageError(f"all_to_allv: {name} must not be negative, got {counts}")
    return counts


def checked_displs(values: Sequence[int] | None, counts: list[int], name: str) -> list[int]:
    if values is None:
        return [sum(counts[:i]) for i in range(len(counts))]
    return checked_counts(values, len(counts), name)


__all__ = [
    "coll_out",
    "coll_tensor",
    "checked_counts",
    "checked_displs",
    "redop_code",
    "team_arg",
    "team_checked",
]
