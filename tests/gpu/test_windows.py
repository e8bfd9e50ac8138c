"""Windows on GPUs (docs/windows.md): every scenario of scripts/window_check.py at 2 and 4 PEs,
launched through the project's launcher with a timeout."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpu_launch import launch_pes
from pe_counts import pe_params

pytest.importorskip("cupy")

SCRIPT = str(Path(__file__).parent / "scripts" / "window_check.py")
PES = pe_params(2, 4)


@pytest.mark.parametrize("n", PES)
@pytest.mark.parametrize("scenario", ["load", "heap", "errors"])
def test_windows(n, scenario):
    out = launch_pes(n, SCRIPT, scenario, 300)  # kernels from CuPy's shared cache
    assert f"PASS {scenario}" in out, out
