"""gshmem for PyTorch: collectives on the current CUDA stream, as torch custom ops.

::

    import gshmem, gshmem.torch as gt
    comm = gshmem.init()
    gt.all_reduce(x)                       # in place, like torch.distributed.all_reduce
    y = gt.all_reduce(x, out=torch.empty_like(x))   # out of place
    g = gt.all_gather(x)                   # new tensor: npes x x.shape[0] rows
    s = gt.reduce_scatter(g, op="max")     # new tensor: g.shape[0] / npes rows
    gt.broadcast(x, root=0)                # in place
    a = gt.all_to_all(x)                   # new tensor; block m of x goes to PE m

Every call is collective over ``team`` (default: every PE of ``comm``), runs on torch's current
stream (capturable in CUDA graphs) and is a custom op in ``torch.ops.gshmem`` (torch.compile
keeps it in the graph; see ops.py for the schemas). ``comm=None`` means the default comm
(``set_default_comm``, else the only live comm of the process). Applications built on these ops
(gshmem.attention) name comms the same way: ``comm_args`` gives a call's (handle, team) and
``lookup_comm`` the comm behind a handle. Which backend runs each
call (gshmem's algorithms or NCCL) is ``comm.explain(...)``'s answer. The functional forms
(always a new tensor) are ``gshmem.torch.functional``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch as _torch

from gshmem._registry import call_args as comm_args
from gshmem._registry import handle as comm_handle
from gshmem._registry import lookup as lookup_comm
from gshmem._registry import set_default_comm
from gshmem.torch import functional, ops

if TYPE_CHECKING:
    from gshmem import Comm
    from gshmem.team import Team


def all_reduce(
    t: _torch.Tensor,
    op: str = "sum",
    comm: Comm | None = None,
    out: _torch.Tensor | None = None,
    team: Team | None = None,
) -> _torch.Tensor:
    """Collective over ``team``; on torch's current stream, returns once enqueued.
    Reduces ``t`` over the team (``op``: sum, prod, min, max): into ``t`` itself (the
    default, as torch.distributed.all_reduce) or into ``out``. Returns the tensor written."""
    h, tm = comm_args(comm, team)
    if out is None or out is t:
        _torch.ops.gshmem.all_reduce_inplace(t, op, h, tm)
        return t
    _torch.ops.gshmem.all_reduce_out(t, out, op, h, tm)
    return out


def all_gather(
    t: _torch.Tensor,
    comm: Comm | None = None,
    out: _torch.Tensor | None = None,
    team: Team | None = None,
) -> _torch.Tensor:
    """Collective over ``team``; on torch's current stream, returns once enqueued.
    Every member's ``t``, concatenated along the first dimension in team order (as
    torch.distributed.all_gather_into_tensor); into ``out`` when given, else a new tensor."""
    h, tm = comm_args(comm, team)
    if out is None:
        return _torch.ops.gshmem.all_gather(t, h, tm)
    _torch.ops.gshmem.all_gather_out(t, out, h, tm)
    return out


def reduce_scatter(
    t: _torch.Tensor,
    op: str = "sum",
    comm: Comm | None = None,
    out: _torch.Tensor | None = None,
    team: Team | None = None,
) -> _torch.Tensor:
    """Collective over ``team``; on torch's current stream, returns once enqueued.
    This member's block (first dimension split in team order) of ``t`` reduced over the team
    (as torch.distributed.reduce_scatter_tensor); into ``out`` when given, else a new tensor."""
    h, tm = comm_args(comm, team)
    if out is None:
        return _torch.ops.gshmem.reduce_scatter(t, op, h, tm)
    _torch.ops.gshmem.reduce_scatter_out(t, out, op, h, tm)
    return out


def broadcast(
    t: _torch.Tensor,
    root: int = 0,
    comm: Comm | None = None,
    out: _torch.Tensor | None = None,
    team: Team | None = None,
) -> _torch.Tensor:
    """Collective over ``team``; on torch's current stream, returns once enqueued.
    Member ``root``'s ``t`` on every member: into ``t`` (the default, as
    torch.distributed.broadcast) or into ``out``."""
    h, tm = comm_args(comm, team)
    if out is None or out is t:
        _torch.ops.gshmem.broadcast_inplace(t, root, h, tm)
        return t
    _torch.ops.gshmem.broadcast_out(t, out, root, h, tm)
    return out


def all_to_all(
    t: _torch.Tensor,
    comm: Comm | None = None,
    out: _torch.Tensor | None = None,
    team: Team | None = None,
) -> _torch.Tensor:
    """Collective over ``team``; on torch's current stream, returns once enqueued.
    Block m of ``t`` (first dimension split in team order) goes to member m, which places it
    at block ``my index`` (as torch.distributed.all_to_all_single with equal splits); into
    ``out`` when given, else a new tensor."""
    h, tm = comm_args(comm, team)
    if out is None:
        return _torch.ops.gshmem.all_to_all(t, h, tm)
    _torch.ops.gshmem.all_to_all_out(t, out, h, tm)
    return out


__all__ = [
    "all_gather",
    "all_reduce",
    "all_to_all",
    "broadcast",
    "comm_args",
    "comm_handle",
    "functional",
    "lookup_comm",
    "ops",
    "reduce_scatter",
    "set_default_comm",
]
