"""Which GPUs a test's processes see when pytest-xdist runs the GPU suite in parallel
(scripts/gpu_check.sh).

- Shared phase (GSHMEM_TEST_ROTATE_GPUS=1): worker ``gwK`` sees the job's GPUs rotated by K, so
  that the PEs of concurrent tests (PE i takes the i-th visible GPU) spread over every GPU
  instead of all starting on the first ones.
- Alone phase (GSHMEM_TEST_PIN_GPU=N): tests marked ``gpu_alone`` measure the GPU (free memory
  after a fault, detection times); worker ``gwK`` gets GPUs K*N .. K*N+N-1 of the job's (modulo
  their count), and every process the test starts sees only those.
"""

from __future__ import annotations

import re

WORKER = re.compile(r"gw(\d+)")


def _ids(worker: str, visible: str | None, count: int) -> tuple[int, list[str]]:
    """(worker index, the job's GPU ids): CUDA_VISIBLE_DEVICES's entries (at most ``count`` of
    them when ``count`` is known: CUDA stops at an entry it cannot use), else 0..count-1."""
    m = WORKER.fullmatch(worker)
    if m is None:
        raise ValueError(f"not a pytest-xdist worker name: {worker!r}")
    ids = [s.strip() for s in visible.split(",") if s.strip()] if visible else []
    if not ids:
        ids = [str(i) for i in range(count)]
    ids = ids[:count] if count > 0 else ids
    if not ids:
        raise ValueError("no GPU to place a test on")
    return int(m.group(1)), ids


def pinned_devices(worker: str, visible: str | None, count: int, per_worker: int = 1) -> str:
    """CUDA_VISIBLE_DEVICES for xdist worker ``worker`` in the alone phase: its own
    ``per_worker`` GPUs. Raises ValueError for a worker name xdist does not give, a job that
    sees no GPU, or fewer GPUs than ``per_worker``."""
    k, ids = _ids(worker, visible, count)
    groups = len(ids) // per_worker if per_worker > 0 else 0
    if groups < 1:
        raise ValueError(f"{per_worker} GPUs per worker, the job sees {len(ids)}")
    start = (k % groups) * per_worker
    return ",".join(ids[start : start + per_worker])


def rotated_devices(worker: str, visible: str | None, count: int) -> str:
    """CUDA_VISIBLE_DEVICES for xdist worker ``worker`` in the shared phase: every GPU, the
    list rotated by the worker's index."""
    k, ids = _ids(worker, visible, count)
    k %= len(ids)
    return ",".join(ids[k:] + ids[:k])
