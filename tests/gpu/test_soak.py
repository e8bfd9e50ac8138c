"""A soak of mixed calls loses nothing (docs/reliability.md): 10,000 calls at 2 PEs (collectives
of random sizes, on-stream ring steps and barriers, graph replays, on two streams), every result
checked on the GPU (scripts/soak_check.py). Two PEs share the GPU when there is only one."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpu_launch import launch_pes

SCRIPT = Path(__file__).parent / "scripts" / "soak_check.py"


@pytest.mark.gpu
def test_soak_of_mixed_calls_loses_nothing():
    out = launch_pes(2, str(SCRIPT), "10000", timeout=400)
    print(next(line for line in out.splitlines() if "PASS" in line))


@pytest.mark.gpu
def test_staged_collectives_of_mixed_grids_keep_their_slots_apart():
    """The same mix with every collective staged (no direct stores): calls of different grids
    must agree on slot parity across CTAs (src/coll/protocol.cuh, end_call); before that fix,
    staged all_gathers and broadcasts of mixed sizes returned stale data within 100 calls."""
    launch_pes(2, str(SCRIPT), "3000", timeout=300, GSHMEM_COLL_DIRECT_MIN="never")
