"""scripts/gpu_check.sh runs the GPU suite in parallel: tests marked gpu_alone (they measure the
GPU) run one per GPU, each pinned by tests/gpu_placement.py; the others share the GPUs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from gpu_placement import pinned_devices

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("worker", "visible", "count", "want"),
    [
        ("gw0", None, 2, "0"),
        ("gw1", None, 2, "1"),
        ("gw2", None, 2, "0"),  # more workers than GPUs: they take turns
        ("gw5", "", 4, "1"),
        ("gw1", "4,5,6", 3, "5"),  # indices into the job's own CUDA_VISIBLE_DEVICES
        ("gw3", "4, 5,6", 3, "4"),
        ("gw1", "GPU-aa,GPU-bb", 2, "GPU-bb"),  # UUIDs pass through
        ("gw1", "2,3,7", 2, "3"),  # CUDA stops at an entry it cannot use: the first `count`
        ("gw7", "6", 0, "6"),  # no count known (no driver here): the listed ones
    ],
)
def test_each_worker_gets_one_gpu(worker, visible, count, want):
    assert pinned_devices(worker, visible, count) == want


@pytest.mark.parametrize(("worker", "visible", "count"), [("master", None, 2), ("gw1", None, 0)])
def test_no_pin_without_a_worker_or_a_gpu(worker, visible, count):
    with pytest.raises(ValueError):
        pinned_devices(worker, visible, count)


def _collected(marker: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "--collect-only", "-m", marker, "tests/gpu"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    return {line for line in out.stdout.splitlines() if "::" in line}


def test_the_phases_split_the_gpu_suite():
    """Every fault case is in the one-per-GPU phase, and nothing else is."""
    alone, shared = _collected("gpu_alone"), _collected("not gpu_alone")
    assert alone and not alone & shared
    assert {t.split("::")[0] for t in alone} == {"tests/gpu/test_faults.py"}
    assert sum("test_fault_is_raised_not_hung" in t for t in alone) == 18
    assert not any("test_faults.py" in t for t in shared)
