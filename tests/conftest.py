"""Shared pytest setup: GPU tests skip cleanly where no GPU is visible; when
scripts/gpu_check.sh runs the suite in parallel, tests marked ``gpu_alone`` get GPUs of their
own and the others spread over every GPU."""

from __future__ import annotations

import os

import failures_at_once
import pytest
from gpu_placement import pinned_devices, rotated_devices
from pe_counts import runs_at


def _gpu_count() -> int:
    try:
        import gshmem

        return gshmem.device_count()
    except Exception:  # noqa: BLE001 - an unimportable package shows up in the CPU tests
        return 0


def pytest_configure(config: pytest.Config) -> None:
    failures_at_once.install(config)
    config.addinivalue_line("markers", "gpus(n): needs at least n CUDA GPUs")
    config.addinivalue_line(
        "markers",
        "gpu_alone: measures the GPU (free memory, detection times), so must not share it with "
        "other tests; its processes fit on one GPU",
    )
    config.addinivalue_line(
        "markers",
        "long: takes minutes on a GPU host; collected first, so that a parallel run starts it "
        "early instead of ending on it",
    )
    config.addinivalue_line(
        "markers",
        "pes(n, counts): the case at n PEs of a test parametrised over counts (pe_counts.py)",
    )
    config.addinivalue_line(  # pytest-xdist's own, declared for runs without it
        "markers", "xdist_group(name): tests of one group run in turn on one xdist worker"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    have = _gpu_count()
    widest_only = os.environ.get("GSHMEM_TEST_WIDEST_PES") == "1"
    narrower = [item for item in items if (m := item.get_closest_marker("pes"))
                and not runs_at(*m.args, gpus=have, widest_only=widest_only)]  # fmt: skip
    if narrower:
        config.hook.pytest_deselected(items=narrower)
        items[:] = [item for item in items if item not in narrower]
    for item in items:
        need = 0
        if item.get_closest_marker("gpu"):
            need = 1
        marker = item.get_closest_marker("gpus")
        if marker:
            need = max(need, int(marker.args[0]))
        if need > have:
            item.add_marker(
                pytest.mark.skip(reason=f"needs {need} CUDA GPU(s), this machine has {have}")
            )
    items.sort(key=lambda item: item.get_closest_marker("long") is None)  # stable: long first


@pytest.fixture(autouse=True)
def _place_on_gpus(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under pytest-xdist (scripts/gpu_check.sh), which GPUs a test's processes see
    (gpu_placement.py): GSHMEM_TEST_PIN_GPU=N gives each ``gpu_alone`` test its worker's own N
    GPUs; GSHMEM_TEST_ROTATE_GPUS=1 rotates every GPU by the worker's index."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        return
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    pin = os.environ.get("GSHMEM_TEST_PIN_GPU")
    if pin and request.node.get_closest_marker("gpu_alone"):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES",
                           pinned_devices(worker, visible, _gpu_count(), int(pin)))  # fmt: skip
    elif os.environ.get("GSHMEM_TEST_ROTATE_GPUS") == "1":
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", rotated_devices(worker, visible, _gpu_count()))


@pytest.fixture
def set_env(monkeypatch: pytest.MonkeyPatch):
    """set_env(name, value): sets an environment variable for the test, or unsets it for None."""

    def set_(name: str, value: str | None) -> None:
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)

    return set_
