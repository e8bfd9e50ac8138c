"""Which backend runs a gshmem.jax call, and the checks of its arguments.

The rule of XLA's NVSHMEM pass (the seeds' account): point-to-point permutes always go to
gshmem; all-reduces (and here the other collectives) go to gshmem up to a size and to XLA's own
collective (NCCL) above it. Overrides: ``GSHMEM_JAX_BACKEND=gshmem|xla|auto`` for every op,
``GSHMEM_JAX_<OP>_BACKEND`` for one (OP: PPERMUTE, PSUM, ALL_GATHER, PSUM_SCATTER, ALL_TO_ALL),
``GSHMEM_JAX_MAX_BYTES`` (default 4M; sizes as GSHMEM_HEAP_RESERVE) for the size.
``explain`` says which and why.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from gshmem import _C
from gshmem._errors import UsageError

OPS = ("ppermute", "psum", "all_gather", "psum_scatter", "all_to_all")
BACKENDS = ("auto", "gshmem", "xla")
DEFAULT_MAX_BYTES = 4 << 20  # 2 x H200: psum 1.2x jax.lax's at 2M, 0.97x at 16M


def choose(op: str, nbytes: int, env: dict[str, str] | None = None) -> tuple[str, str]:
    """(backend, reason) for ``op`` moving ``nbytes`` per device."""
    if op not in OPS:
        raise UsageError(f"unknown op {op!r}; one of {OPS}")
    env = os.environ if env is None else env
    for var in (f"GSHMEM_JAX_{op.upper()}_BACKEND", "GSHMEM_JAX_BACKEND"):
        value = env.get(var, "").strip().lower()
        if value and value not in BACKENDS:
            raise UsageError(f"{var}={value!r}; one of {BACKENDS}")
        if value in ("gshmem", "xla"):
            return value, f"{var}={value}"
    if op == "ppermute":
        return "gshmem", "permutes always go to gshmem"
    limit = int(_C.parse_size(env.get("GSHMEM_JAX_MAX_BYTES", str(DEFAULT_MAX_BYTES))))
    if nbytes <= limit:
        return "gshmem", f"{nbytes} B <= GSHMEM_JAX_MAX_BYTES ({limit} B)"
    return "xla", f"{nbytes} B > GSHMEM_JAX_MAX_BYTES ({limit} B): XLA's collective"


# GSHMEM_JAX_PPERMUTE_KERNEL_MAX's default: where the kernel's bulk protocol (~225 GB/s: 80.8 us
# at 16 MiB on 4 x H200, comm.permute) meets the staged copy-engine path (~33 us of flags and
# stream operations, then the copy engine and a local copy out of the slot); docs/jax-measured.md.
DEFAULT_KERNEL_MAX = 16 << 20


def permute_path(nbytes: int, env: dict[str, str] | None = None, one_process: bool = False) -> str:
    """How a gshmem ppermute of ``nbytes`` per device moves: up to GSHMEM_JAX_PPERMUTE_KERNEL_MAX
    (default DEFAULT_KERNEL_MAX) by the C API's permute kernel straight into the receiver,
    "packets" (LL packets, one NVLink crossing) or from GSHMEM_PERMUTE_BULK_MIN "bulk" (plain
    stores and a flag per chunk), as gshmem_permute_on_stream chooses from the process's
    environment; above it by the copy engines (zero SMs): "copy engine direct" (straight into
    the receiver's output) where one process drives every device (``one_process``) unless
    GSHMEM_JAX_PPERMUTE_DIRECT=0, else "copy engine" (through the staging slot)."""
    env = os.environ if env is None else env
    limit = int(_C.parse_size(env.get("GSHMEM_JAX_PPERMUTE_KERNEL_MAX", str(DEFAULT_KERNEL_MAX))))
    if 0 < nbytes <= limit:
        return _C.permute_path(nbytes, False)
    direct = env.get("GSHMEM_JAX_PPERMUTE_DIRECT", "1").strip()
    if direct not in ("0", "1"):
        raise UsageError(f"GSHMEM_JAX_PPERMUTE_DIRECT={direct!r}; 0 or 1")
    return "copy engine direct" if one_process and direct == "1" else "copy engine"


def check_perm(perm: Sequence[tuple[int, int]], size: int) -> tuple[tuple[int, int], ...]:
    """``perm`` as a tuple of (source, destination) pairs, or a UsageError saying what is wrong
    (as jax.lax.ppermute: indices in range, no source or destination twice)."""
    try:
        pairs = tuple((int(s), int(d)) for s, d in perm)
    except (TypeError, ValueError):
        raise UsageError(f"perm must be (source, destination) pairs, got {perm!r}") from None
    for s, d in pairs:
        if not (0 <= s < size and 0 <= d < size):
            raise UsageError(f"perm pair {(s, d)} is outside the axis of size {size}")
    for which, values in (
        ("source", [s for s, _ in pairs]),
        ("destination", [d for _, d in pairs]),
    ):
        if len(set(values)) != len(values):
            raise UsageError(f"perm is not a permutation: a {which} appears twice in {pairs}")
    return pairs


def inverse(perm: Sequence[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """The permutation that undoes ``perm``: ppermute's transpose."""
    return tuple((d, s) for s, d in perm)


__all__ = [
    "BACKENDS",
    "DEFAULT_MAX_BYTES",
    "OPS",
    "check_perm",
    "choose",
    "inverse",
    "permute_path",
]
