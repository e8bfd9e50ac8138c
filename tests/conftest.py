"""Shared pytest setup: GPU tests skip cleanly where no GPU is visible."""

from __future__ import annotations

import pytest


def _gpu_count() -> int:
    try:
        import gshmem

        return gshmem.device_count()
    except Exception:  # noqa: BLE001 - an unimportable package shows up in the CPU tests
        return 0


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpus(n): needs at least n CUDA GPUs")


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


@pytest.fixture
def set_env(monkeypatch: pytest.MonkeyPatch):
    """set_env(name, value): sets an environment variable for the test, or unsets it for None."""

    def set_(name: str, value: str | None) -> None:
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)

    return set_
