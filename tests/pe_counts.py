"""The PE counts a multi-PE GPU test runs at.

A test parametrised with ``pe_params(2, 4)`` runs at each count the machine has GPUs for. With
GSHMEM_TEST_WIDEST_PES=1 (scripts/gpu_check.sh sets it) only the widest of them that fits runs,
besides 1-PE cases (their single-PE path is code of its own): at 4 GPUs a test runs at 4 PEs and
its 2-PE case, which the check at 2 GPUs runs, is deselected.
"""

from __future__ import annotations

import pytest


def pe_params(*counts: int) -> list:
    """pytest parameters ``n`` for ``counts`` PEs, each id'd ``<n>pe``, needing n GPUs and marked
    ``pes(n, counts)``."""
    return [
        pytest.param(n, marks=[pytest.mark.gpus(n), pytest.mark.pes(n, counts)], id=f"{n}pe")
        for n in counts
    ]


def runs_at(n: int, counts: tuple[int, ...], gpus: int, widest_only: bool) -> bool:
    """Whether the case at ``n`` PEs of a test parametrised over ``counts`` runs on a machine
    with ``gpus`` GPUs (cases needing more GPUs are skipped elsewhere, not here)."""
    if not widest_only or n == 1:
        return True
    fitting = [c for c in counts if 1 < c <= gpus]
    return not fitting or n == max(fitting)
