"""Context-parallel ring attention on GPUs (scripts/attention_check.py runs as each PE)."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpu_launch import launch_pes
from pe_counts import pe_params

SCRIPT = str(Path(__file__).parent / "scripts" / "attention_check.py")

PES = pe_params(2, 4)


@pytest.mark.parametrize("n", PES)
@pytest.mark.parametrize("scenario", ["dense", "varlen", "graph", "compile", "badargs", "replay"])
def test_ring_attention(n, scenario):
    launch_pes(n, SCRIPT, scenario, timeout=400)
