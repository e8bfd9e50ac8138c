"""The proxy path's network engine (UCX) and proxy thread between real processes, on host memory:
on loopback, across two network namespaces joined by a veth pair (two "hosts" on one machine),
and when UCX is missing or a peer dies (net_worker.py runs each rank)."""

from __future__ import annotations

import os

import pytest
from _net_ranks import run_ranks
from _netns import two_hosts_fixture  # noqa: F401  (the two_hosts fixture)

from gshmem import _C, _ucx

pytestmark = pytest.mark.skipif(
    _ucx.wheel_library() is None and not os.environ.get("GSHMEM_UCX_LIB"),
    reason="no UCX here (pip install libucx-cu13, or set GSHMEM_UCX_LIB)",
)


# Every transfer one-sided (the default for the test's sizes), every one a rendezvous message,
# every one a rendezvous in parts of 1000 bytes (most transfers several parts, the last short),
# or every one staged through 4 KiB chunks (two per direction: pools run dry, parts wait).
BULK = pytest.mark.parametrize(
    "bulk",
    [{}, {"NET_BULK_BYTES": "1"}, {"NET_BULK_BYTES": "1", "NET_BULK_PART": "1000"},
     {"NET_BULK_BYTES": "1", "NET_STAGING_CHUNK": "4096"}],
    ids=["rma", "bulk", "parts", "staged"],
)  # fmt: skip


def clean_results(scenario: str, nranks: int, **launch) -> list[dict]:
    """Runs ``scenario`` on ``nranks`` ranks (run_ranks' options); every rank must have finished
    and found nothing wrong. Returns each rank's result."""
    results = run_ranks(scenario, nranks, **launch)
    for rank, res in enumerate(results):
        assert res["ok"], (rank, res)
        assert res["result"]["errors"] == [], (rank, res)
    return [res["result"] for res in results]


@BULK
@pytest.mark.parametrize("nranks", [2, 3, 4])
def test_put_get_signal_between_processes(nranks, bulk):
    for got in clean_results("rma", nranks, env=bulk):
        assert got["sizes"] == [(1 << 16) + 4096 * r for r in range(nranks)]
        assert [r.split(":")[0] for r in got["refused"]] == [
            "overrun", "self", "misaligned signal", "no region"]  # fmt: skip
        assert all("UsageError" in r for r in got["refused"]), got["refused"]


# Over TCP a put leaves the origin before it reaches the target, so a flush that finished too
# early would be seen: each rank looks at its peers' memory the moment a flush finishes.
@BULK
@pytest.mark.parametrize("tls", ["tcp", "default"])
@pytest.mark.parametrize("nranks", [2, 3])
def test_non_blocking_flushes_finish_and_cover_what_came_before(nranks, tls, bulk, tmp_path):
    env = bulk | {"NET_SHARED_DIR": str(tmp_path)} | ({"UCX_TLS": "tcp"} if tls == "tcp" else {})
    for got in clean_results("flushes", nranks, env=env):
        assert got["spent"].startswith("UsageError: no network flush"), got


# Over TCP the one-sided puts complete later than they are issued, so a signal sent early
# would be seen before its data; shared memory (UCX's own choice here) completes them sooner.
# Both held signals: a put_signal's and a fenced signal's (the proxy's signal descriptor).
@BULK
@pytest.mark.parametrize("tls", ["tcp", "default"])
def test_signals_in_flight_never_overtake_their_data(tls, bulk):
    env = bulk | ({"UCX_TLS": "tcp"} if tls == "tcp" else {})
    clean_results("signals_follow_data", 3, env=env)


@BULK
@pytest.mark.parametrize("nranks", [2, 3])
def test_proxy_thread_executes_host_descriptors(nranks, bulk):
    for got in clean_results("proxy", nranks, env=bulk):
        # per peer: 200 put_signals, a signal add, 4 put_values, an inline put_signal, a signal
        # set, a fence, a get and a put to the heap region; three quiets
        assert got["retired"] == (nranks - 1) * 210 + 3
        if len(os.sched_getaffinity(0)) > 1:  # else every thread is on that one core anyway
            assert got["pinned_threads"] == 1 and not got["caller_pinned"], got


@pytest.mark.parametrize("nranks", [2, 3])
def test_atomics_and_value_gets_through_the_proxy(nranks):
    # every atomic of proxy_queue.h (32/64-bit integers and floats, fetching or not) and value
    # gets of 1-8 bytes, every rank at every other at once, applied by the target's CPU sink
    clean_results("atomics", nranks)


def test_cpus_near_a_pci_device_from_sysfs(tmp_path):
    def device(bus_id: str, cpulist: str) -> None:
        d = tmp_path / "bus" / "pci" / "devices" / bus_id
        d.mkdir(parents=True)
        (d / "local_cpulist").write_text(cpulist + "\n")

    device("0000:1b:00.0", "0-3,8,10-11")
    device("0000:3a:00.0", "not a list")
    root = str(tmp_path)
    assert _C.cpus_near_pci_device("0000:1B:00.0", root) == [0, 1, 2, 3, 8, 10, 11]
    assert _C.cpus_near_pci_device("0000:3a:00.0", root) == []
    assert _C.cpus_near_pci_device("0000:99:00.0", root) == []


@BULK
@pytest.mark.parametrize("scenario", ["die", "die_proxy"])
def test_dead_peer_is_a_fault_not_a_hang(scenario, bulk):
    survivor, _ = run_ranks(scenario, 2, timeout=10.0, env=bulk)
    assert survivor["ok"], survivor
    got = survivor["result"]
    # the engine notices the dead peer itself (in ~0.01 s), long before any timeout
    assert got["error"] == "FaultError", got
    assert "rank 1" in got["message"], got
    assert got["after"] < 5.0, got


@pytest.mark.parametrize("local_shm", ["1", "0"], ids=["shared-memory", "ucx-peer-failure"])
def test_dead_peer_is_noticed_with_nothing_in_flight(local_shm):
    # Shared memory reports nothing by itself: the engine watches a local peer's process.
    survivor, _ = run_ranks("die_idle", 2, timeout=10.0, env={"NET_LOCAL_SHM": local_shm})
    assert survivor["ok"], survivor
    got = survivor["result"]
    assert got["error"] == "FaultError", got
    assert "rank 1" in got["message"], got
    assert got["after"] < 5.0, got


def test_peers_on_this_host_connect_by_shared_memory_alone():
    """With UCX limited to its shared-memory transports, peers on one host reach each other when
    their endpoints leave UCX's error handling off (the default); in UCX's peer-failure mode
    they are unreachable (no shared-memory transport reports a dead peer), which is what left
    the proxy's messages on TCP loopback before."""
    env = {"UCX_TLS": "sm,self"}
    for got in clean_results("rma", 2, env=env):
        assert got["sizes"] == [(1 << 16) + 4096 * r for r in range(2)]
    refused = run_ranks("rma", 2, env={**env, "NET_LOCAL_SHM": "0"})
    for res in refused:
        assert not res["ok"] and "unreachable" in res["message"], res


@BULK
def test_stalled_peer_is_a_timeout_naming_it(bulk):
    # Over TCP a put completes only when the target's worker progresses; rank 1 never does.
    env = {"UCX_TLS": "tcp", **bulk}
    survivor, _ = run_ranks("stall", 2, timeout=10.0, env=env, kill_after=1)
    assert survivor["ok"], survivor
    got = survivor["result"]
    assert got["error"] == "TimeoutError", got
    assert "rank(s) 1" in got["message"], got
    assert 4.9 <= got["after"] < 5.0 + 5.0, got  # the engine's timeout: 5 s (to the millisecond)


def test_missing_ucx_is_a_clear_error():
    results = run_ranks("rma", 2, env={"GSHMEM_UCX_LIB": "/nonexistent/libucp.so"})
    for res in results:
        assert not res["ok"], res
        assert "could not be loaded from /nonexistent/libucp.so" in res["message"], res
        assert "libucx-cu13" in res["message"], res


@BULK
@pytest.mark.parametrize("scenario", ["rma", "proxy"])
def test_two_hosts_bootstrap_and_move_data_over_tcp(two_hosts, scenario, bulk):
    # UCX_TLS=tcp: the namespaces share this machine's memory, so without it UCX could take a
    # shared-memory path; the test is about what crosses the network.
    env = {"UCX_TLS": "tcp", "GSHMEM_BOOTSTRAP_ADDR": "10.251.0.1", **bulk}
    _, prefix = two_hosts
    clean_results(scenario, 2, address="10.251.0.1", prefix=prefix, env=env)
