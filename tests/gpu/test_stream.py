"""On-stream operations on GPUs (tests/gpu/scripts/stream_check.py runs as each PE)."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpu_launch import launch_pes
from pe_counts import pe_params

SCRIPT = str(Path(__file__).parent / "scripts" / "stream_check.py")

PES = pe_params(2, 4)

# Copy engines only, and with the small-message kernels in play (the default threshold, 16 KiB,
# lies between the two).
COPY_ENGINE = {"GSHMEM_STREAM_KERNEL_MAX_BYTES": "0"}
SMALL_KERNELS = {"GSHMEM_STREAM_KERNEL_MAX_BYTES": "64K"}


@pytest.mark.parametrize("n", PES)
@pytest.mark.parametrize("scenario", ["rma", "stress", "cmp", "graph", "streams", "badargs"])
def test_stream(n, scenario):
    launch_pes(n, SCRIPT, scenario, **COPY_ENGINE)


@pytest.mark.parametrize("n", PES)
@pytest.mark.parametrize("scenario", ["rma", "stress", "graph"])
def test_stream_small_kernels(n, scenario):
    out = launch_pes(n, SCRIPT, scenario, **SMALL_KERNELS)
    assert "kernel threshold 65536 B" in out


@pytest.mark.gpus(2)
def test_stream_refuses_unreachable_pes():
    # GSHMEM_TRANSPORT=p2p: without it, peers that loads and stores miss go through the proxy
    launch_pes(2, SCRIPT, "nop2p", GSHMEM_DISABLE_P2P="1", GSHMEM_TRANSPORT="p2p")
