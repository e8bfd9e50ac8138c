"""Loading the optional native libraries installed next to libgshmem.so (libgshmem_jax.so,
libgshmem_moe.so): one place that says what is missing and how to get it."""

from __future__ import annotations

import ctypes
from pathlib import Path

from gshmem._errors import UsageError


def load(name: str, missing: str) -> ctypes.CDLL:
    """``lib<name>.so`` from gshmem's library directory; ``missing``: why it may be absent and
    what to do, for the error raised when it is."""
    import gshmem

    path = Path(gshmem.library_dir()) / f"lib{name}.so"
    if not path.is_file():
        raise UsageError(f"{path} is missing: {missing}")
    return ctypes.CDLL(str(path))


__all__ = ["load"]
