"""MoE dispatch and combine on GPUs (scripts/moe_check.py runs as each PE)."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpu_launch import launch_pes

SCRIPT = str(Path(__file__).parent / "scripts" / "moe_check.py")

PES = [pytest.param(n, marks=pytest.mark.gpus(n), id=f"{n}pe") for n in (1, 2, 4)]


@pytest.mark.parametrize("n", PES)
@pytest.mark.parametrize("scenario", ["values", "grad", "badargs"])
def test_moe(n, scenario):
    launch_pes(n, SCRIPT, scenario, timeout=300)
