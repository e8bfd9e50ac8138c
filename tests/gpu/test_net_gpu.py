"""The proxy path with GPUs: the network engine (UCX) moving data between CUDA regions of two
processes (on two GPUs, or sharing one), signals into host memory (net_worker.py "gpu"); and
kernels as the proxy's producers ("gpu_producers")."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "cpu"))
from _net_ranks import run_ranks  # noqa: E402  (the CPU tests' launcher)

from gshmem import _ucx  # noqa: E402

# Proxy threads and UCX crawl when their processes time-slice a GPU with other tests: in a
# parallel run (scripts/gpu_check.sh) one worker takes these in turn, from the start (long: in
# turn they take minutes, and begun mid-run they ended past the 2-GPU check's limit).
pytestmark = [pytest.mark.xdist_group("proxy"), pytest.mark.long]


@pytest.mark.gpu
@pytest.mark.skipif(_ucx.wheel_library() is None, reason="no UCX here (pip install libucx-cu13)")
def test_put_get_between_gpu_regions():
    for rank, res in enumerate(run_ranks("gpu", 2, timeout=60.0)):
        assert res["ok"], (rank, res)
        assert res["result"]["errors"] == [], (rank, res)


@pytest.mark.gpu
@pytest.mark.skipif(_ucx.wheel_library() is None, reason="no UCX here (pip install libucx-cu13)")
def test_kernels_feed_the_proxy():
    pytest.importorskip("cupy")
    for rank, res in enumerate(run_ranks("gpu_producers", 2, timeout=120.0)):
        assert res["ok"], (rank, res)
        assert res["result"]["errors"] == [], (rank, res)
        assert res["result"]["retired"] == 8 * 32 * 4 + 1, res
        print(f"rank {rank}: the kernel met a full queue {res['result']['full_waits']} times")
