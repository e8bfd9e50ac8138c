"""Which GPU a test that must have a GPU to itself runs on, when pytest-xdist runs the GPU suite
in parallel (scripts/gpu_check.sh).

Tests marked ``gpu_alone`` measure the GPU (free memory after a fault, detection times) and run
in a phase of their own, one worker per GPU: worker ``gwK`` gets GPU ``K mod count`` of those
the job may see, and every process the test starts sees only that GPU (its PEs share it).
"""

from __future__ import annotations

import re

WORKER = re.compile(r"gw(\d+)")


def pinned_devices(worker: str, visible: str | None, count: int) -> str:
    """The CUDA_VISIBLE_DEVICES value for xdist worker ``worker`` ("gw0", "gw1", ...).

    ``visible`` is the job's CUDA_VISIBLE_DEVICES (None or "" when unset: GPUs 0..count-1),
    ``count`` the GPUs the job sees. Raises ValueError for a worker name xdist does not give or
    a job that sees no GPU."""
    m = WORKER.fullmatch(worker)
    if m is None:
        raise ValueError(f"not a pytest-xdist worker name: {worker!r}")
    ids = [s.strip() for s in visible.split(",") if s.strip()] if visible else []
    if not ids:
        ids = [str(i) for i in range(count)]
    ids = ids[:count] if count > 0 else ids
    if not ids:
        raise ValueError("no GPU to pin a test to")
    return ids[int(m.group(1)) % len(ids)]
