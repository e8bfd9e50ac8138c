"""Comms by integer handle, for gshmem.torch's custom ops (whose schemas cannot take Python
objects). Free of torch, so that every ``Comm`` registers itself when it is created.

``handle(comm)`` registers a comm (weakly: the registry never keeps one alive) and returns its
handle; ``lookup(h)`` returns it, or raises a clear ``gshmem.UsageError``. ``comm=None`` in the
``gshmem.torch`` functions means the default comm: the one ``set_default_comm`` named, else the
only live comm of the process.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from typing import TYPE_CHECKING

from gshmem._errors import UsageError

if TYPE_CHECKING:
    from gshmem._comm_like import CommLike
    from gshmem.team import Team

_lock = threading.Lock()
_next = itertools.count(1)
_by_handle: dict[int, weakref.ref[CommLike]] = {}
_default: tuple[int, int] | None = None  # (handle, nranks) of set_default_comm's comm


def handle(comm: CommLike) -> int:
    """The integer handle of ``comm`` (registered on first use). After the first call it is an
    attribute read, which torch.compile traces without a graph break."""
    h = getattr(comm, "_torch_handle", None)
    if h is not None:
        return h
    with _lock:
        h = next(_next)

        def forget(_ref: object, h: int = h) -> None:
            with _lock:
                _by_handle.pop(h, None)

        _by_handle[h] = weakref.ref(comm, forget)
        comm._torch_handle = h  # type: ignore[attr-defined]
        return h


def lookup(h: int) -> CommLike:
    """The comm behind handle ``h``; UsageError when it is unknown, collected or finalized."""
    ref = _by_handle.get(int(h))
    comm = ref() if ref is not None else None
    if comm is None:
        raise UsageError(
            f"gshmem.torch: no comm has handle {h} (it was garbage-collected, or the handle "
            "comes from another process); pass comm= explicitly"
        )
    if not comm.alive:
        raise UsageError(f"gshmem.torch: comm with handle {h} has been finalized")
    return comm


def set_default_comm(comm: CommLike | None) -> None:
    """The comm that ``comm=None`` means in gshmem.torch (None: forget the default)."""
    global _default
    _default = None if comm is None else (handle(comm), comm.nranks)


def resolve(comm: CommLike | None) -> int:
    """The handle for a ``comm=`` argument (None: the default comm, see the module doc)."""
    if comm is not None:
        return handle(comm)
    if _default is not None:
        return _default[0]  # checked when the op runs (lookup), as every handle is
    live = [h for h, ref in list(_by_handle.items()) if (c := ref()) is not None and c.alive]
    if len(live) == 1:
        return live[0]
    raise UsageError(
        "gshmem.torch: no default comm; pass comm=, or call "
        "gshmem.torch.set_default_comm(comm) once"
        + (f" ({len(live)} live comms are registered)" if live else "")
    )


def call_args(comm: CommLike | None, team: Team | None) -> tuple[int, list[int]]:
    """(handle, [start, stride, size]) for a call's ``comm=`` and ``team=``: what the custom ops'
    schemas take. torch.compile traces it without a graph break when ``comm`` is given or a
    default is set (attribute reads only); the only-live-comm fallback is for eager code."""
    if comm is not None:
        h, n = handle(comm), comm.nranks
    elif _default is not None:
        h, n = _default
    else:
        h = resolve(None)
        n = lookup(h).nranks
    return h, [0, 1, n] if team is None else [team.start, team.stride, team.size]


__all__ = ["call_args", "handle", "lookup", "resolve", "set_default_comm"]
