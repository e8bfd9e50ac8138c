"""A pytest plugin for tests/cpu/test_gpu_placement.py (``-p _collect_markers``): prints every
collected test's id and marker names as ``ITEM<TAB>id<TAB>m1,m2``, in the final order, after
``BEFORE<TAB>id`` lines in the order collection produced before any other plugin reordered it."""

from __future__ import annotations

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        print(f"BEFORE\t{item.nodeid}")


def pytest_collection_finish(session: pytest.Session) -> None:
    for item in session.items:
        names = sorted({m.name for m in item.iter_markers()})
        print(f"ITEM\t{item.nodeid}\t{','.join(names)}")
