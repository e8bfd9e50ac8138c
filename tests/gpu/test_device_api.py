"""Device API on GPUs (include/gshmem/device.cuh): every scenario of scripts/device_api_check.py
at 2 and 4 PEs, each launched through the project's launcher with a timeout."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpu_launch import launch_pes

pytest.importorskip("cupy")

SCRIPT = str(Path(__file__).parent / "scripts" / "device_api_check.py")
SCENARIOS = [
    "rma",
    "signal",
    "pg",
    "strided",
    "amo",
    "order",
    "wait",
    "barrier",
    "ptr",
    "coll_movers",
    "coll_reduce",
]
PES = [pytest.param(n, marks=pytest.mark.gpus(n), id=f"{n}pe") for n in (2, 4)]


def launch(n: int, scenario: str, cache_dir: Path, timeout: int = 600) -> str:
    return launch_pes(n, SCRIPT, scenario, timeout, CUPY_CACHE_DIR=str(cache_dir))


@pytest.fixture(scope="session")
def cupy_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One CuPy kernel cache for the session: the test kernels compile once, not per run."""
    return tmp_path_factory.mktemp("cupy_cache")


@pytest.mark.parametrize("n", PES)
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_device_api(n, scenario, cupy_cache):
    launch(n, scenario, cupy_cache)


@pytest.mark.gpus(2)
def test_put_get_bandwidth_32mib(cupy_cache):
    out = launch(2, "bw", cupy_cache)
    lines = [line for line in out.splitlines() if "BW " in line]
    print("\n".join(lines))
    assert len(lines) == 6, out
