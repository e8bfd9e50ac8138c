"""MoE dispatch and combine on GPUs (scripts/moe_check.py and moe_ll_check.py run as each PE)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from gpu_launch import launch_pes
from pe_counts import pe_params

from gshmem.moe.high_throughput import PULL_FROM_WORLD

SCRIPTS = Path(__file__).parent / "scripts"

PES = pe_params(1, 2, 4)


def stopped_job(n: int, script: str, scenario: str) -> str:
    """The output of ``scenario`` run on ``n`` PEs, which must stop with an error (a device trap
    on some rank) rather than pass or outrun the launcher's limit (a hang)."""
    cmd = [sys.executable, "-m", "gshmem.run", "-n", str(n), "--timeout", "100",
           str(SCRIPTS / script), scenario]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=150,
                          env={**os.environ, "GSHMEM_TIMEOUT": "60"})  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode not in (0, 124), out
    return out


@pytest.mark.parametrize("n", PES)
@pytest.mark.parametrize("scenario", ["values", "grad", "fp8", "badargs", "worst", "tokens"])
def test_moe(n, scenario):
    launch_pes(n, str(SCRIPTS / "moe_check.py"), scenario, timeout=300)


@pytest.mark.parametrize("n", PES)
@pytest.mark.parametrize("scenario", ["values", "grad", "fp8", "tokens"])
def test_moe_other_combine(n, scenario):
    """The same checks with the combine that is not the default at n ranks (push below
    PULL_FROM_WORLD, pull from there): both stay checked at every size."""
    other = "push" if n >= PULL_FROM_WORLD else "pull"
    launch_pes(n, str(SCRIPTS / "moe_check.py"), scenario, timeout=300, GSHMEM_MOE_COMBINE=other)


@pytest.mark.parametrize("n", PES)
@pytest.mark.parametrize("scenario", ["values", "hook", "graph", "fp8", "badargs"])
def test_moe_low_latency(n, scenario):
    launch_pes(n, str(SCRIPTS / "moe_ll_check.py"), scenario, timeout=300)


@pytest.mark.parametrize("n", PES)
def test_moe_low_latency_bad_expert_stops_every_rank(n):
    """A bad expert index in low-latency mode (no host synchronisation to raise from) stops the
    kernel with a message naming the entry, and the launcher stops every rank: no hang."""
    out = stopped_job(n, "moe_ll_check.py", "trap")
    assert "topk_idx[3][1]" in out and "outside [-1," in out, out


@pytest.mark.parametrize("n", PES)
def test_moe_dispatch_over_its_bound_stops_every_rank(n):
    """A dispatch without a host synchronisation whose ranks receive more rows than the caller's
    num_worst_rows stops the kernels with a message naming the count and the bound, and the
    launcher stops every rank: nothing is silently dropped, nothing hangs."""
    out = stopped_job(n, "moe_check.py", "overflow")
    assert "more than num_worst_rows=3" in out, out
