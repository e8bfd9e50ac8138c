"""Comms by integer handle, for torch custom ops (whose schemas cannot take Python objects).

``handle(comm)`` registers a comm (weakly: the registry never keeps one alive) and returns its
handle; ``lookup(h)`` returns it, or raises a clear ``gshmem.UsageError``. ``comm=None`` in the
``gshmem.torch`` functions means the default comm: the one ``set_default_comm`` named, else the
only live comm registered, else the most recent ``gshmem.init()``'s (when registered by it).
"""

from __future__ import annotations

import itertools
import threading
import weakref
from typing import TYPE_CHECKING

from gshmem._errors import UsageError

if TYPE_CHECKING:
    from gshmem.comm import Comm

_lock = threading.Lock()
_next = itertools.count(1)
_by_handle: dict[int, weakref.ref[Comm]] = {}
_by_id: dict[int, int] = {}  # id(comm) -> handle
_default: int | None = None


def handle(comm: Comm) -> int:
    """The integer handle of ``comm`` (registered on first use)."""
    with _lock:
        h = _by_id.get(id(comm))
        if h is not None and _by_handle[h]() is comm:
            return h
        h = next(_next)

        def forget(_ref: object, h: int = h, key: int = id(comm)) -> None:
            with _lock:
                _by_handle.pop(h, None)
                if _by_id.get(key) == h:
                    del _by_id[key]

        _by_handle[h] = weakref.ref(comm, forget)
        _by_id[id(comm)] = h
        return h


def lookup(h: int) -> Comm:
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


def set_default_comm(comm: Comm | None) -> None:
    """The comm that ``comm=None`` means in gshmem.torch (None: forget the default)."""
    global _default
    _default = None if comm is None else handle(comm)


def resolve(comm: Comm | None) -> int:
    """The handle for a ``comm=`` argument (None: the default comm, see the module doc)."""
    if comm is not None:
        return handle(comm)
    if _default is not None:
        try:
            lookup(_default)
            return _default
        except UsageError:
            pass
    live = [h for h, ref in list(_by_handle.items()) if (c := ref()) is not None and c.alive]
    if len(live) == 1:
        return live[0]
    raise UsageError(
        "gshmem.torch: no default comm; pass comm=, or call "
        "gshmem.torch.set_default_comm(comm) once"
        + (f" ({len(live)} live comms are registered)" if live else "")
    )


__all__ = ["handle", "lookup", "resolve", "set_default_comm"]
