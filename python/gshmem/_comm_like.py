"""CommLike: what the modules below Comm (team, device, coll_select, _registry) need of a comm,
as a typing Protocol, so that none of them imports comm.py, which is built on top of them."""

from __future__ import annotations

from typing import Any, Protocol


class CommLike(Protocol):
    _handle: Any  # gshmem._C.CommHandle
    rank: int
    nranks: int
    device: int

    @property
    def alive(self) -> bool: ...


__all__ = ["CommLike"]
