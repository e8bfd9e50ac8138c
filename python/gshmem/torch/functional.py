"""Functional collectives (always a new tensor, inputs untouched), like
torch.distributed._functional_collectives: the forms torch.compile prefers."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from gshmem._registry import call_args as _args

if TYPE_CHECKING:
    from gshmem import Comm
    from gshmem.team import Team


def all_reduce(
    t: torch.Tensor, op: str = "sum", comm: Comm | None = None, team: Team | None = None
) -> torch.Tensor:
    """Collective over ``team`` (default: every PE of ``comm``, default: the process's comm): a
    new tensor holding ``op`` over the members' ``t``; on torch's current stream, returned before
    the data is ready."""
    return torch.ops.gshmem.all_reduce(t, op, *_args(comm, team))


def all_gather(t: torch.Tensor, comm: Comm | None = None, team: Team | None = None) -> torch.Tensor:
    """Collective over ``team``: a new tensor ``[team size, *t.shape]`` of every member's ``t``;
    on torch's current stream, returned before the data is ready."""
    return torch.ops.gshmem.all_gather(t, *_args(comm, team))


def reduce_scatter(
    t: torch.Tensor, op: str = "sum", comm: Comm | None = None, team: Team | None = None
) -> torch.Tensor:
    """Collective over ``team``: a new tensor, this member's block of ``op`` over the members'
    ``t``; on torch's current stream, returned before the data is ready."""
    return torch.ops.gshmem.reduce_scatter(t, op, *_args(comm, team))


def broadcast(
    t: torch.Tensor, root: int = 0, comm: Comm | None = None, team: Team | None = None
) -> torch.Tensor:
    """Collective over ``team``: a new tensor holding member ``root``'s ``t``; on torch's current
    stream, returned before the data is ready."""
    return torch.ops.gshmem.broadcast(t, root, *_args(comm, team))


def all_to_all(t: torch.Tensor, comm: Comm | None = None, team: Team | None = None) -> torch.Tensor:
    """Collective over ``team``: a new tensor whose block ``m`` is member ``m``'s block for this
    member; on torch's current stream, returned before the data is ready."""
    return torch.ops.gshmem.all_to_all(t, *_args(comm, team))


__all__ = ["all_gather", "all_reduce", "all_to_all", "broadcast", "reduce_scatter"]
