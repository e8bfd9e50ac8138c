"""Collectives on a stream on GPUs (tests/gpu/scripts/coll_check.py runs as each PE).

gshmem's own algorithms only (GSHMEM_COLL_BACKEND=gshmem; the NCCL backend has its own tests).
Each scenario forces every algorithm it covers through GSHMEM_COLL_<OP>_ALGO in-process.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from gpu_launch import launch_pes
from pe_counts import pe_params

SCRIPT = str(Path(__file__).parent / "scripts" / "coll_check.py")

PES = pe_params(2, 4)
GSHMEM_ONLY = {"GSHMEM_COLL_BACKEND": "gshmem"}


@pytest.mark.parametrize("n", PES)
@pytest.mark.parametrize(
    "scenario", ["matrix", "big", "teams", "streams", "badargs", "permute", "exchange"]
)
def test_coll(n, scenario):
    launch_pes(n, SCRIPT, scenario, **GSHMEM_ONLY)


@pytest.mark.parametrize("n", PES)
@pytest.mark.parametrize("bulk_min", ["1", "never"], ids=["bulk", "packets"])
def test_permute_on_one_protocol(n, bulk_min):
    # Every size of the permute scenario on the kernel's bulk protocol, then on its packets.
    launch_pes(n, SCRIPT, "permute", GSHMEM_PERMUTE_BULK_MIN=bulk_min, **GSHMEM_ONLY)


@pytest.mark.parametrize("n", PES)
def test_permute_by_copy_engine(n):
    launch_pes(n, SCRIPT, "permute_copy", GSHMEM_PERMUTE_COPY_MIN="64K", **GSHMEM_ONLY)


@pytest.mark.parametrize("n", PES)
def test_coll_graph(n):
    # Small staging slots, so that each captured call spans several kernel launches.
    launch_pes(n, SCRIPT, "graph", GSHMEM_COLL_SCRATCH_BYTES="1M", **GSHMEM_ONLY)


@pytest.mark.parametrize("n", PES)
def test_coll_mismatched_calls_are_detected(n):
    out = launch_pes(n, SCRIPT, "mismatch", GSHMEM_COLL_CHECK="1", **GSHMEM_ONLY)
    assert "mismatched collective calls" in out


TORCH_SCRIPT = str(Path(__file__).parent / "scripts" / "coll_torch_check.py")


@pytest.mark.parametrize("n", PES)
@pytest.mark.parametrize("scenario", ["torch", "nccl"])
def test_coll_torch_and_nccl(n, scenario):
    launch_pes(n, TORCH_SCRIPT, scenario)
