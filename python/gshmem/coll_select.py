"""Backend choice of the collectives (docs/collectives.md, "Backend choice").

``Comm.enable_nccl()`` and ``Comm.explain(op, nbytes, npes=None, symmetric=False)`` call into
here. Each collective call chooses gshmem's own algorithm or NCCL from the size, the PE count,
whether its output is symmetric (a staged output gives NCCL large calls sooner), whether NCCL is
enabled on the comm, and the environment (``GSHMEM_COLL_BACKEND``, ``GSHMEM_COLL_<OP>_BACKEND``,
``GSHMEM_COLL_<OP>_ALGO`` and the thresholds); ``explain`` reports that choice and the rule
behind it, without running anything.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from gshmem import _C
from gshmem._errors import UsageError

if TYPE_CHECKING:
    from gshmem._comm_like import CommLike

OPS: tuple[str, ...] = tuple(_C.COLL_SELECT_OPS)


def op_code(op: object) -> int:
    """``"all_reduce"`` ... ``"barrier"`` (any case, ``-`` or ``_``) -> GSHMEM_COLL_*."""
    key = op.lower().replace("-", "_") if isinstance(op, str) else None
    if key not in _C.COLL_SELECT_OPS:
        raise UsageError(f"op must be one of {', '.join(OPS)}; got {op!r}")
    return int(_C.COLL_SELECT_OPS[key])


def nccl_wheel_dirs() -> list[str]:
    """The lib folders of an installed nvidia-nccl wheel (``nvidia/nccl/lib`` under any
    ``sys.path`` entry), found without importing it."""
    found = []
    for entry in sys.path:
        lib = Path(entry or ".") / "nvidia" / "nccl" / "lib"
        if (lib / "libnccl.so.2").is_file():
            found.append(str(lib.resolve()))
    return found


def _point_at_wheel() -> None:
    """Adds the wheel's folder to GSHMEM_NCCL_SEARCH_PATH (read by the native loader after
    libnccl.so.2 by the loader's own search), unless the user set it."""
    if "GSHMEM_NCCL_SEARCH_PATH" in os.environ:
        return
    dirs = nccl_wheel_dirs()
    if dirs:
        os.environ["GSHMEM_NCCL_SEARCH_PATH"] = ":".join(dirs)


def enable_nccl(comm: CommLike) -> None:
    """Collective: loads NCCL (never required) and creates its communicator over ``comm``'s
    bootstrap, so that later collectives on the world team may choose it. Every PE raises the
    same ``gshmem.UsageError`` when any PE cannot load it; gshmem's own collectives keep
    working."""
    _point_at_wheel()
    _C.comm_enable_nccl(comm._handle)


def explain(
    comm: CommLike,
    op: str,
    nbytes: int,
    npes: int | None = None,
    symmetric: bool = False,
    symmetric_input: bool = False,
) -> str:
    """Which backend and algorithm a collective ``op`` with ``nbytes`` of input per PE over
    ``npes`` PEs (default: every PE) would use on ``comm``, and why; ``symmetric``: its output
    is a symmetric tensor (``comm.empty``; for all_to_all, not the input); ``symmetric_input``:
    its input too (a two-shot all_reduce then pulls: "two_shot pull"). Not collective."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
        raise UsageError(f"nbytes must be a non-negative int, got {nbytes!r}")
    if npes is not None and (isinstance(npes, bool) or not isinstance(npes, int) or npes < 1):
        raise UsageError(f"npes must be a positive int or None, got {npes!r}")
    return str(
        _C.comm_coll_explain(
            comm._handle, op_code(op), nbytes, npes or 0, bool(symmetric), bool(symmetric_input)
        )
    )


def choose(
    op: str,
    nbytes: int,
    npes: int,
    nccl_available: bool = False,
    symmetric: bool = False,
    beyond_reach: bool = False,
    proxy: bool = False,
    symmetric_input: bool = False,
) -> tuple[str, str, str]:
    """(backend, algorithm, reason) for a query, without a comm (what ``explain`` reports;
    tests and planning tools). Reads the same environment variables. ``beyond_reach``: some
    member is not load/store-reachable (another host): NCCL serves it, or, when the comm has a
    proxy path (``proxy``), gshmem's ``exchange`` for all_gather, broadcast and all_to_all into
    a symmetric output. ``symmetric_input``: the input is symmetric too ("two_shot pull")."""
    code = op_code(op)
    return tuple(  # type: ignore[return-value]
        _C.coll_choose(
            code, nbytes, npes, nccl_available, symmetric, beyond_reach, proxy, symmetric_input
        )
    )


__all__ = ["OPS", "choose", "enable_nccl", "explain", "nccl_wheel_dirs", "op_code"]
