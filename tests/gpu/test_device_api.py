"""Device API on GPUs (include/gshmem/device.cuh): every scenario of scripts/device_api_check.py
at 2 and 4 PEs, each launched through the project's launcher with a timeout."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpu_launch import launch_pes
from pe_counts import pe_params

pytest.importorskip("cupy")

SCRIPT = str(Path(__file__).parent / "scripts" / "device_api_check.py")
SCENARIOS = [
    "rma",
    "signal",
    "pg",
    "strided",
    "amo",
    "order",
    "packets",
    "wait",
    "barrier",
    "ptr",
    "coll_movers",
    "coll_reduce",
]
PES = pe_params(2, 4)


# The kernels compile through CuPy's kernel cache (CUPY_CACHE_DIR, else CuPy's default), which
# every test process shares: keyed by source, options and the headers' digest, so one compile
# serves the whole run, and scripts/gpu_check.sh fills it before the tests start.
def launch(n: int, scenario: str, timeout: int = 600) -> str:
    return launch_pes(n, SCRIPT, scenario, timeout)


@pytest.mark.parametrize("n", PES)
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_device_api(n, scenario):
    launch(n, scenario)


@pytest.mark.gpus(2)
def test_put_get_bandwidth_32mib():
    out = launch(2, "bw")
    lines = [line for line in out.splitlines() if "BW " in line]
    print("\n".join(lines))
    assert len(lines) == 6, out
