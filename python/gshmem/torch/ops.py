"""The torch custom ops behind gshmem.torch's collectives (namespace ``torch.ops.gshmem``).

Registered with ``torch.library.custom_op`` so torch.compile keeps them in its graphs (never
traced into, never reordered across their mutations) and CUDA graphs capture them (each runs on
the current stream). Schemas take plain values: ``comm`` is an integer handle
(gshmem/_registry.py) and ``team`` is ``[start, stride, size]`` of world PEs (the Python
wrappers fill it in).

Per collective: a functional op returning a new tensor (``gshmem::all_reduce``), an ``_out``
op writing a given tensor (``mutates_args=("out",)``), and for all_reduce and broadcast an
``_inplace`` op (``mutates_args=("t",)``), as torch.distributed's in-place calls.
"""

from __future__ import annotations

import torch
from torch import Tensor

from gshmem import _registry as registry
from gshmem._errors import UsageError

NAMESPACE = "gshmem"
REDUCE_OPS = ("sum", "prod", "min", "max")


def _check(name: str, t: Tensor, out: Tensor | None = None) -> None:
    for what, x in (("t", t), ("out", out)):
        if x is None:
            continue
        if x.device.type != "cuda":
            raise UsageError(
                f"gshmem.torch.{name}: {what} is on {x.device}; gshmem collectives run on CUDA "
                "tensors of the comm's GPU"
            )
        if not x.is_contiguous():
            raise UsageError(f"gshmem.torch.{name}: {what} must be contiguous (.contiguous())")


def _team(comm, team: list[int]):
    if not team:
        return None
    from gshmem.team import Team

    start, stride, size = (int(v) for v in team)
    offset = comm.rank - start
    member = offset >= 0 and offset % stride == 0 and offset // stride < size
    return Team(start, stride, size, offset // stride if member else -1)


def _comm(name: str, handle: int):
    comm = registry.lookup(handle)
    if not hasattr(comm, name):
        raise UsageError(
            f"gshmem.torch.{name}: this gshmem build's Comm has no {name} (collectives missing)"
        )
    return comm


def _npes(team: list[int]) -> int:
    return int(team[2])


# -- all_reduce -----------------------------------------------------------------------------------
@torch.library.custom_op(f"{NAMESPACE}::all_reduce_out", mutates_args=("out",))
def all_reduce_out(t: Tensor, out: Tensor, op: str, comm: int, team: list[int]) -> None:
    _check("all_reduce", t, out)
    c = _comm("all_reduce", comm)
    c.all_reduce(t, op=op, out=out, team=_team(c, team))


@torch.library.custom_op(f"{NAMESPACE}::all_reduce_inplace", mutates_args=("t",))
def all_reduce_inplace(t: Tensor, op: str, comm: int, team: list[int]) -> None:
    _check("all_reduce", t)
    c = _comm("all_reduce", comm)
    c.all_reduce(t, op=op, out=t, team=_team(c, team))


@torch.library.custom_op(f"{NAMESPACE}::all_reduce", mutates_args=())
def all_reduce(t: Tensor, op: str, comm: int, team: list[int]) -> Tensor:
    _check("all_reduce", t)
    out = torch.empty_like(t)
    all_reduce_out(t, out, op, comm, team)
    return out


@all_reduce.register_fake
def _(t: Tensor, op: str, comm: int, team: list[int]) -> Tensor:
    return torch.empty_like(t)


# -- all_gather: out has npes x t's first dimension ----------------------------------------------
def _gathered(t: Tensor, team: list[int]) -> Tensor:
    shape = (t.shape[0] * _npes(team), *t.shape[1:]) if t.dim() else (_npes(team),)
    return t.new_empty(shape)


@torch.library.custom_op(f"{NAMESPACE}::all_gather_out", mutates_args=("out",))
def all_gather_out(t: Tensor, out: Tensor, comm: int, team: list[int]) -> None:
    _check("all_gather", t, out)
    c = _comm("all_gather", comm)
    c.all_gather(t, out=out, team=_team(c, team))


@torch.library.custom_op(f"{NAMESPACE}::all_gather", mutates_args=())
def all_gather(t: Tensor, comm: int, team: list[int]) -> Tensor:
    _check("all_gather", t)
    out = _gathered(t, team)
    all_gather_out(t, out, comm, team)
    return out


@all_gather.register_fake
def _(t: Tensor, comm: int, team: list[int]) -> Tensor:
    return _gathered(t, team)


# -- reduce_scatter: out has t's first dimension / npes ------------------------------------------
def _scattered(t: Tensor, team: list[int]) -> Tensor:
    n = _npes(team)
    if t.dim() == 0 or t.shape[0] % n:
        raise UsageError(
            f"gshmem.torch.reduce_scatter: t's first dimension ({tuple(t.shape)}) must be a "
            f"multiple of the {n} PEs"
        )
    return t.new_empty((t.shape[0] // n, *t.shape[1:]))


@torch.library.custom_op(f"{NAMESPACE}::reduce_scatter_out", mutates_args=("out",))
def reduce_scatter_out(t: Tensor, out: Tensor, op: str, comm: int, team: list[int]) -> None:
    _check("reduce_scatter", t, out)
    c = _comm("reduce_scatter", comm)
    c.reduce_scatter(t, out=out, op=op, team=_team(c, team))


@torch.library.custom_op(f"{NAMESPACE}::reduce_scatter", mutates_args=())
def reduce_scatter(t: Tensor, op: str, comm: int, team: list[int]) -> Tensor:
    _check("reduce_scatter", t)
    out = _scattered(t, team)
    reduce_scatter_out(t, out, op, comm, team)
    return out


@reduce_scatter.register_fake
def _(t: Tensor, op: str, comm: int, team: list[int]) -> Tensor:
    return _scattered(t, team)


# -- broadcast ------------------------------------------------------------------------------------
@torch.library.custom_op(f"{NAMESPACE}::broadcast_out", mutates_args=("out",))
def broadcast_out(t: Tensor, out: Tensor, root: int, comm: int, team: list[int]) -> None:
    _check("broadcast", t, out)
    c = _comm("broadcast", comm)
    c.broadcast(t, root, out=out, team=_team(c, team))


@torch.library.custom_op(f"{NAMESPACE}::broadcast_inplace", mutates_args=("t",))
def broadcast_inplace(t: Tensor, root: int, comm: int, team: list[int]) -> None:
    _check("broadcast", t)
    c = _comm("broadcast", comm)
    c.broadcast(t, root, out=t, team=_team(c, team))


@torch.library.custom_op(f"{NAMESPACE}::broadcast", mutates_args=())
def broadcast(t: Tensor, root: int, comm: int, team: list[int]) -> Tensor:
    _check("broadcast", t)
    out = torch.empty_like(t)
    broadcast_out(t, out, root, comm, team)
    return out


@broadcast.register_fake
def _(t: Tensor, root: int, comm: int, team: list[int]) -> Tensor:
    return torch.empty_like(t)


# -- all_to_all: same shape; block m of t goes to PE m -------------------------------------------
@torch.library.custom_op(f"{NAMESPACE}::all_to_all_out", mutates_args=("out",))
def all_to_all_out(t: Tensor, out: Tensor, comm: int, team: list[int]) -> None:
    _check("all_to_all", t, out)
    c = _comm("all_to_all", comm)
    c.all_to_all(t, out=out, team=_team(c, team))


@torch.library.custom_op(f"{NAMESPACE}::all_to_all", mutates_args=())
def all_to_all(t: Tensor, comm: int, team: list[int]) -> Tensor:
    _check("all_to_all", t)
    out = torch.empty_like(t)
    all_to_all_out(t, out, comm, team)
    return out


@all_to_all.register_fake
def _(t: Tensor, comm: int, team: list[int]) -> Tensor:
    return torch.empty_like(t)


OPS = (
    "all_reduce", "all_reduce_out", "all_reduce_inplace",
    "all_gather", "all_gather_out",
    "reduce_scatter", "reduce_scatter_out",
    "broadcast", "broadcast_out", "broadcast_inplace",
    "all_to_all", "all_to_all_out",
)  # fmt: skip
