"""Shared pytest setup: GPU tests skip cleanly where no GPU is visible; tests marked
``gpu_alone`` get a GPU of their own when scripts/gpu_check.sh runs the suite in parallel."""

from __future__ import annotations

import os

import pytest
from gpu_placement import pinned_devices


def _gpu_count() -> int:
    try:
        import gshmem

        return gshmem.device_count()
    except Exception:  # noqa: BLE001 - an unimportable package shows up in the CPU tests
        return 0


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpus(n): needs at least n CUDA GPUs")
    config.addinivalue_line(
        "markers",
        "gpu_alone: measures the GPU (free memory, detection times), so must not share it with "
        "other tests; its processes fit on one GPU",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    have = _gpu_count()
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


@pytest.fixture(autouse=True)
def _pin_to_one_gpu(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under GSHMEM_TEST_PIN_GPU=1 and pytest-xdist, a ``gpu_alone`` test's processes see only
    its worker's GPU (gpu_placement.py), so that one such test runs per GPU at a time."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if (
        worker
        and os.environ.get("GSHMEM_TEST_PIN_GPU") == "1"
        and request.node.get_closest_marker("gpu_alone")
    ):
        visible = pinned_devices(worker, os.environ.get("CUDA_VISIBLE_DEVICES"), _gpu_count())
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)


@pytest.fixture
def set_env(monkeypatch: pytest.MonkeyPatch):
    """set_env(name, value): sets an environment variable for the test, or unsets it for None."""

    def set_(name: str, value: str | None) -> None:
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)

    return set_
