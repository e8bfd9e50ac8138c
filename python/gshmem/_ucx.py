"""Where the proxy path finds UCX: libgshmem loads libucp at run time from GSHMEM_UCX_LIB, else
from the system. When the variable is unset and the ``libucx-cu13`` wheel is installed, the
wheel's library is named there, so that pip alone is enough (child processes inherit it)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path


def wheel_library() -> str | None:
    """The libucp.so of the installed libucx wheel, or None."""
    spec = importlib.util.find_spec("libucx")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "lib" / "libucp.so"
    return str(path) if path.is_file() else None


def name_wheel_library() -> None:
    """Sets GSHMEM_UCX_LIB to the wheel's libucp.so unless the user set it."""
    if not os.environ.get("GSHMEM_UCX_LIB"):
        found = wheel_library()
        if found is not None:
            os.environ["GSHMEM_UCX_LIB"] = found


__all__ = ["name_wheel_library", "wheel_library"]
