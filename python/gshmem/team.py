"""Teams: strided sets of world PEs, as values (DESIGN.md §3, include/gshmem/device/team.cuh).

A ``Team`` is PEs ``start, start + stride, ..., start + (size - 1) * stride`` of the world, seen
from one PE (``rank`` is that PE's index in the team, -1 when it is not a member). Making a team
is local arithmetic, never a collective, and a team owns no memory: kernels receive it by value
(``bytes(team)`` or ``team.numpy()``, the C ``gshmem_team_t``) and device barriers on it use the
runtime's per-PE counters. The arithmetic is the C++ of src/team/, shared with C and kernels.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from gshmem import _C

if TYPE_CHECKING:
    from gshmem._comm_like import CommLike


class TeamStruct(ctypes.Structure):
    """The C ``gshmem_team_t`` (include/gshmem/device_state.h)."""

    _fields_ = [
        ("start", ctypes.c_int32),
        ("stride", ctypes.c_int32),
        ("size", ctypes.c_int32),
        ("my_pe", ctypes.c_int32),
    ]


@dataclass(frozen=True)
class Team:
    start: int
    stride: int
    size: int
    rank: int  # this PE's index in the team, -1 when it is not a member

    @classmethod
    def world(cls, comm: CommLike) -> Team:
        """Every PE of ``comm``."""
        return cls(*_C.team_world(comm._handle))

    @classmethod
    def node(cls, comm: CommLike) -> Team:
        """The PEs ``comm`` reaches by loads and stores (raises UsageError when they are not
        evenly strided in the world)."""
        return cls(*_C.team_node(comm._handle))

    @property
    def is_member(self) -> bool:
        return self.rank >= 0

    def _tuple(self) -> tuple[int, int, int, int]:
        return (self.start, self.stride, self.size, self.rank)

    def split_strided(self, start: int, stride: int, size: int) -> Team:
        """PEs ``start, start + stride, ...`` (``size`` of them) of this team, in this team's
        numbering. The calling PE must be a member of this team."""
        return Team(*_C.team_split_strided(self._tuple(), start, stride, size))

    def split_2d(self, xrange: int) -> tuple[Team, Team]:
        """(row, column) of the calling PE when this team is laid out in rows of ``xrange``."""
        x, y = _C.team_split_2d(self._tuple(), xrange)
        return Team(*x), Team(*y)

    def translate_pe(self, pe: int, dst: Team) -> int:
        """Index in ``dst`` of this team's PE ``pe``, or -1 when it is not a member of ``dst``."""
        return int(_C.team_translate_pe(self._tuple(), pe, dst._tuple()))

    def world_pe(self, pe: int) -> int:
        """World rank of this team's PE ``pe``."""
        if not 0 <= pe < self.size:
            raise IndexError(f"PE {pe} is outside a team of {self.size}")
        return self.start + pe * self.stride

    def members(self) -> list[int]:
        """World ranks of every PE of the team, in team order."""
        return [self.start + i * self.stride for i in range(self.size)]

    def struct(self) -> TeamStruct:
        return TeamStruct(self.start, self.stride, self.size, self.rank)

    def __bytes__(self) -> bytes:
        return bytes(self.struct())

    def numpy(self) -> np.ndarray:
        """A one-element structured array holding the ``gshmem_team_t``: CuPy passes it to a
        kernel's ``gshmem::Team`` parameter by value."""
        return np.frombuffer(bytes(self), dtype=np.dtype(TeamStruct)).copy()


__all__ = ["Team", "TeamStruct"]
