"""Faults never hang a job (docs/reliability.md): PE 1 dies (kill -9) or stays silent while PE 0
waits for it in a kernel, a barrier, an all_reduce, an on-stream wait, a graph replay, a MoE
dispatch or a ring-attention step; PE 0 raises gshmem.FaultError within GSHMEM_TIMEOUT + 5 s and
leaves nothing behind (scripts/fault_check.py). Two PEs share the GPU when there is only
one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# Each case checks the GPU's free memory and a detection time: one case per GPU at a time when
# the suite runs in parallel (scripts/gpu_check.sh, tests/gpu_placement.py).
pytestmark = pytest.mark.gpu_alone

SCRIPT = Path(__file__).parent / "scripts" / "fault_check.py"
SCENARIOS = [
    "signal",
    "packets",
    "barrier",
    "all_reduce",
    "stream",
    "rearm",
    "put_after",
    "graph",
    "moe",
    "attention",
]


@pytest.mark.gpu
@pytest.mark.parametrize("how", ["kill", "silent"])
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_fault_is_raised_not_hung(scenario, how):
    proc = subprocess.run([sys.executable, str(SCRIPT), scenario, how], capture_output=True,
                          text=True, timeout=240)  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert f"PASS {scenario} {how}" in out, out
    print(next(line for line in out.splitlines() if line.startswith("PASS")))  # the delay


@pytest.mark.gpu
def test_abort_releases_a_wait_whose_hardware_queue_is_shared():
    # One hardware queue for every stream: the release must not queue behind the blocked wait.
    env = {**os.environ, "CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    proc = subprocess.run([sys.executable, str(SCRIPT), "shared_queue"], capture_output=True,
                          text=True, timeout=120, env=env)  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "PASS shared_queue" in out, out
