"""The comm's proxy path on the GPU (docs/network.md): two PEs with GSHMEM_TRANSPORT=proxy, so
every peer is reached through the proxy thread and UCX even on one host (the two processes may
share one GPU: the proxy path needs no P2P). Kernel modules load eagerly: a kernel lazily loaded
while another waits on the proxy stalls the proxy thread's CUDA calls (docs/network.md)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gshmem import _ucx

pytest.importorskip("cupy")
from gpu_launch import launch_pes  # noqa: E402
from pe_counts import pe_params  # noqa: E402

SCRIPTS = Path(__file__).parent / "scripts"

# Proxy threads and UCX crawl when their processes time-slice a GPU with other tests: in a
# parallel run (scripts/gpu_check.sh) one worker takes these in turn, from the start (long: in
# turn they take minutes, and begun mid-run they ended past the 2-GPU check's limit).
pytestmark = [pytest.mark.xdist_group("proxy"), pytest.mark.long]
PROXY = {"GSHMEM_TRANSPORT": "proxy", "CUDA_MODULE_LOADING": "EAGER", "GSHMEM_TIMEOUT": "60"}
needs_ucx = pytest.mark.skipif(
    _ucx.wheel_library() is None and not os.environ.get("GSHMEM_UCX_LIB"),
    reason="no UCX here (pip install libucx-cu13)",
)


# Several scenarios per launch, in turn on one comm: a launch costs ~15 s before its first
# scenario (two processes, every module loaded eagerly, UCX, the kernels compiled), and these
# tests run one after another on one worker, the GPU check's longest chain.


@pytest.mark.gpu
@needs_ucx
def test_put_signal_and_get_through_the_proxy():
    scenarios = ["basic", "nbi", "stream", "sizes_nbi", "coll"]
    out = launch_pes(2, str(SCRIPTS / "proxy_check.py"), scenarios, timeout=300, **PROXY)
    print(out[-2000:])


@pytest.mark.gpu
@needs_ucx
@pytest.mark.parametrize("n", pe_params(2, 4))
def test_collectives_and_permutes_through_the_proxy(n):
    # all_gather, all_to_all, broadcast and permute into symmetric outputs as exchanges through
    # the proxy (no NCCL), a graph replayed, other outputs refused; all_reduce and
    # reduce_scatter staged through the exchange slots, in several pieces (small scratch)
    launch_pes(n, str(SCRIPTS / "coll_check.py"), "exchange", timeout=300,
               GSHMEM_COLL_SCRATCH_BYTES="1M", **PROXY)  # fmt: skip


@pytest.mark.gpu
@needs_ucx
@pytest.mark.parametrize("suites", [["signal", "amo", "pg", "strided"], ["barrier"]],
                         ids=["signal-amo-pg-strided", "barrier"])  # fmt: skip
def test_device_api_suite_through_the_proxy(suites):
    # signal: every scope, SET and ADD, blocking and non-blocking, 1 B .. 8 MiB, data after the
    # signal; barrier: p to the right neighbour (put_value through the proxy), the team barrier,
    # the left neighbour's value checked, on the world and a strided team, every scope; amo:
    # every atomic on 32/64-bit integers and floats, fetching or not, from many threads (applied
    # by the target's proxy on its GPU), exact totals and every fetched value accounted for;
    # pg: p and g of 1-8 bytes; strided: iput/iget at every scope (one descriptor per element)
    env = {**PROXY, "GSHMEM_TEST_SMALL": "1"} if suites == ["barrier"] else PROXY
    launch_pes(2, str(SCRIPTS / "device_api_check.py"), suites, timeout=400, **env)


@pytest.mark.gpu
@needs_ucx
@pytest.mark.parametrize("scenario", ["load", "heap"])
def test_windows_through_the_proxy(scenario):
    # every peer's part of the window reached through the proxy: puts with SignalAdd and
    # CounterInc (counted by the proxy once the source may go), put_value, flush, the barrier
    out = launch_pes(2, str(SCRIPTS / "window_check.py"), scenario, timeout=300, **PROXY)
    assert f"PASS {scenario}" in out, out
