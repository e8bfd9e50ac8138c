"""gshmem.jax on GPUs in both JAX layouts (tests/gpu/scripts/jax_check.py): one process driving
every GPU, and one process per GPU under jax.distributed."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from gpu_launch import launch_pes
from pe_counts import pe_params
from ports import private_port

if importlib.util.find_spec("jax") is None:
    pytest.skip("jax is not installed", allow_module_level=True)

SCRIPT = str(Path(__file__).parent / "scripts" / "jax_check.py")
ATTENTION = ["attention_ring", "attention_allgather"]
SCENARIOS = ["values", "grad", "loop", "split", "staged", "direct", "badargs", *ATTENTION]
ENV = {"GSHMEM_TIMEOUT": "120", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}


# attention compiles six programs per algorithm (~100 s each in the 4-GPU check): long, first
EVERY_GPU = [pytest.param(s, marks=pytest.mark.long) if s in ATTENTION else s for s in SCENARIOS]


@pytest.mark.gpus(2)
@pytest.mark.parametrize("scenario", EVERY_GPU)
def test_one_process_every_gpu(scenario):
    proc = subprocess.run([sys.executable, SCRIPT, scenario], capture_output=True, text=True,
                          timeout=300, env={**os.environ, **ENV})  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert out.count(f"PASS {scenario}") == 1, out


# direct puts need every device in one process: one-process layout only
PER_GPU = [pytest.param(s, marks=pytest.mark.long) if s in ATTENTION else s
           for s in SCENARIOS if s != "direct"]  # fmt: skip


@pytest.mark.parametrize("n", pe_params(2, 4))
@pytest.mark.parametrize("scenario", PER_GPU)
def test_one_process_per_gpu(n, scenario):
    launch_pes(n, SCRIPT, scenario, timeout=300, JAX_COORDINATOR_PORT=str(private_port()), **ENV)
