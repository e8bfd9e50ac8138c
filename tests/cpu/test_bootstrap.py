"""The TCP bootstrap and the local fd channel across real processes on loopback (no GPU)."""

from __future__ import annotations

import hashlib
import json
import os
import random
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from _netns import two_hosts_fixture  # noqa: F401  (the two_hosts fixture)
from bootstrap_worker import big_payload

from gshmem import _C, BootstrapError, Error, HeapError, TimeoutError, UsageError

WORKER = str(Path(__file__).with_name("bootstrap_worker.py"))
SECRET = slice(24, 40)  # where the 128-bit secret sits inside a unique id


def new_uid() -> bytes:
    return _C.unique_id_create("127.0.0.1", 0, False)


def start(uid: bytes, rank: int, nranks: int, scenario: str, timeout: float = 10.0):
    args = [sys.executable, WORKER, uid.hex(), str(rank), str(nranks), str(timeout), scenario]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def outcome(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=60)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    assert lines, f"worker printed no result (rc={proc.returncode}): {err}"
    return json.loads(lines[-1])


@pytest.mark.parametrize("nranks", [1, 2, 3, 4, 8])
def test_collectives_and_fd_passing(nranks):
    uid = new_uid()
    results = [outcome(p) for p in [start(uid, r, nranks, "collectives") for r in range(nranks)]]
    for rank, res in enumerate(results):
        assert res["ok"], res
        got = res["result"]
        assert got["allgather"] == [b for r in range(nranks) for b in (r, 255 - r, 7)]
        assert got["broadcast"] == f"from {nranks - 1}" * 3
        whole = b"".join(big_payload(r) for r in range(nranks))  # every rank's, in rank order
        assert got["big"] == [len(whole), hashlib.sha256(whole).hexdigest()]
        assert got["fds"] == [None if r == rank else f"memory of rank {r}" for r in range(nranks)]


def test_wrong_secret_is_refused_and_the_job_still_forms():
    uid = new_uid()
    forged = bytearray(uid)
    forged[SECRET] = bytes(b ^ 0x5A for b in forged[SECRET])
    root = start(uid, 0, 2, "collectives")
    intruder = outcome(start(bytes(forged), 1, 2, "collectives"))
    assert not intruder["ok"]
    assert intruder["error"] == "BootstrapError"
    assert "secret" in intruder["msg"]
    honest = start(uid, 1, 2, "collectives")
    assert outcome(root)["ok"]
    assert outcome(honest)["ok"]


def rendezvous(uid: bytes) -> socket.socket:
    """A connection to rank 0's bootstrap port, retried until rank 0 listens."""
    host, port = _C.unique_id_describe(uid).split(":")
    deadline = time.monotonic() + 10
    while True:
        try:
            return socket.create_connection((host, int(port)), timeout=5)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def hello(uid: bytes, rank: int, nranks: int, *, magic=0x42485347, version=1) -> bytes:
    """A bootstrap Hello (tcp_bootstrap.cpp) carrying uid's secret."""
    return struct.pack("<IIii16s", magic, version, rank, nranks, uid[SECRET])


def test_garbage_and_silent_connections_neither_break_nor_delay_the_job():
    """Rank 0 meets port scanners, stale processes and noise before the real rank 1: the job
    still forms, without waiting for the silent connections' Hello deadline (5 s each)."""
    uid = new_uid()
    root = start(uid, 0, 2, "collectives", timeout=30.0)
    silent = [rendezvous(uid) for _ in range(4)]  # connect, say nothing, stay open
    noise = [b"", b"\x00", os.urandom(16), os.urandom(40), os.urandom(4096),
             hello(uid, 1, 2)[:20],  # a Hello cut short
             hello(uid, 1, 2, magic=0x12345678), hello(uid, 1, 2, version=99),
             hello(bytes(64), 1, 2)]  # fmt: skip
    rng = random.Random(7)  # and random greetings: a real magic and version, the rest random
    noise += [hello(uid, 1, 2)[:8] + os.urandom(rng.randrange(0, 64)) for _ in range(20)]
    for payload in noise:
        s = rendezvous(uid)
        s.sendall(payload)
        s.close()
    begin = time.monotonic()
    honest = start(uid, 1, 2, "collectives", timeout=30.0)
    assert outcome(root)["ok"]
    assert outcome(honest)["ok"]
    assert time.monotonic() - begin < 4.0, "the silent connections delayed the job"
    for s in silent:
        s.close()


def test_an_authenticated_hello_with_a_bad_rank_fails_the_job_clearly():
    """A process with the job's secret but a rank outside [1, nranks): every rank (and it) is
    told why, nobody waits for the timeout."""
    uid = new_uid()
    root = start(uid, 0, 2, "collectives", timeout=30.0)
    s = rendezvous(uid)
    s.sendall(hello(uid, 7, 2))
    s.settimeout(10)
    magic, op, _, status, _, size = struct.unpack("<IIIiQQ", s.recv(32, socket.MSG_WAITALL))
    assert (magic, op) == (0x4D485347, 4) and status != 0
    assert b"out of range" in s.recv(size, socket.MSG_WAITALL)
    res = outcome(root)
    assert res["error"] == "UsageError" and "claim rank 7" in res["msg"]
    s.close()


@pytest.mark.parametrize(
    "header",
    [
        struct.pack("<IIIiQQ", 0x4D485347, 1, 0, 0, 1, 1 << 62),  # allgather of 2^62 bytes
        struct.pack("<IIIiQQ", 0xDEADBEEF, 1, 0, 0, 1, 3),  # bad magic
        os.urandom(32),
    ],
    ids=["huge", "magic", "random"],
)
def test_a_malformed_request_from_an_admitted_rank_fails_fast_and_clearly(header):
    """Rank 1 (a process holding the secret) sends a malformed request in rank 0's allgather:
    rank 0 must name the mismatch at once, not allocate what it announces or wait for it."""
    uid = new_uid()
    root = start(uid, 0, 2, "collectives", timeout=30.0)
    s = rendezvous(uid)
    s.sendall(hello(uid, 1, 2))
    s.settimeout(10)
    assert struct.unpack("<IIIiQQ", s.recv(32, socket.MSG_WAITALL))[3] == 0  # admitted
    begin = time.monotonic()
    s.sendall(header)
    res = outcome(root)
    assert res["error"] == "UsageError" and "collective mismatch" in res["msg"], res
    assert time.monotonic() - begin < 5.0
    s.close()


def test_missing_rank_times_out_naming_it_on_every_rank():
    uid = new_uid()
    procs = [start(uid, r, 4, "collectives", timeout=2.0) for r in (0, 1, 3)]
    for res in map(outcome, procs):
        assert not res["ok"]
        assert res["error"] == "TimeoutError", res
        assert "rank(s) 2 of 4" in res["msg"]
        assert "GSHMEM_TIMEOUT" in res["msg"]


def test_rank_zero_never_started_times_out():
    res = outcome(start(new_uid(), 1, 2, "collectives", timeout=1.0))
    assert res["error"] == "TimeoutError"
    assert "rank 0" in res["msg"]


def test_collective_mismatch_is_reported_on_every_rank():
    uid = new_uid()
    for res in map(outcome, [start(uid, r, 3, "mismatch") for r in range(3)]):
        assert not res["ok"]
        assert res["error"] == "UsageError"
        assert "collective mismatch" in res["msg"]


def test_a_rank_that_dies_is_named():
    uid = new_uid()
    procs = [start(uid, 0, 3, "survivor"), start(uid, 1, 3, "exit-after-connect")]
    procs.append(start(uid, 2, 3, "survivor"))
    root, _, other = (outcome(p) if i != 1 else p.wait(30) for i, p in enumerate(procs))
    assert root["error"] == "BootstrapError"
    assert "rank 1 closed the connection" in root["msg"]
    assert other["error"] == "BootstrapError"
    assert "rank 1" in other["msg"]


@pytest.mark.parametrize("victim", [0, 1])
def test_a_rank_killed_while_the_others_wait_is_named_at_once(victim):
    """kill -9 of a rank (rank 0, the hub, or another) while the others wait in a collective:
    they fail naming it within seconds, not after GSHMEM_TIMEOUT (60 s here)."""
    uid = new_uid()
    procs = [start(uid, r, 3, "stall" if r == victim else "survivor", timeout=60.0)
             for r in range(3)]  # fmt: skip
    stalled = procs[victim]
    assert json.loads(stalled.stdout.readline())["connected"]
    time.sleep(0.5)  # the others are inside their first collective by now
    begin = time.monotonic()
    stalled.kill()
    stalled.wait(10)
    for r, p in enumerate(procs):
        if r == victim:
            continue
        res = outcome(p)
        assert res["error"] == "BootstrapError", res
        assert f"rank {victim}" in res["msg"], res
    assert time.monotonic() - begin < 10.0


@pytest.mark.parametrize("victim", [0, 2])
def test_a_closed_connection_is_seen_without_a_collective_and_relayed_by_rank_0(victim):
    """The watchdog's view: while no collective runs, kill -9 of a rank shows as its closed
    connection within a second; rank 0 names it to the others (its announcement fails their next
    collective with the same words); when rank 0 itself dies, every rank sees rank 0."""
    uid = new_uid()
    procs = [start(uid, r, 3, "watch", timeout=60.0) for r in range(3)]
    for p in procs:
        assert json.loads(p.stdout.readline())["connected"]
    time.sleep(1.0)
    assert all(p.poll() is None for p in procs), "a connection was reported closed too early"
    begin = time.monotonic()
    procs[victim].kill()
    procs[victim].wait(10)
    results = {r: outcome(p)["result"] for r, p in enumerate(procs) if r != victim}
    assert time.monotonic() - begin < 5.0
    if victim == 0:
        for res in results.values():
            assert res["closed"] == 0 and res["notice"] == "", res
            assert res["next"].startswith("BootstrapError"), res
        return
    announced = "PE 2 is gone (announced by rank 0)"
    assert results[0]["closed"] == 2, results
    assert results[0]["next"] == f"FaultError: {announced}", results
    assert results[1] == {"closed": 0, "notice": announced, "next": f"FaultError: {announced}"}


def test_a_host_that_stops_answering_is_seen_by_keepalive(two_hosts):
    """A host that dies closes nothing: two namespaces stand for two hosts, and the link of
    rank 1's goes down after the job formed. Keepalive probes (5 s idle, 3 every 2 s) fail the
    connection on both sides, and both ranks' next collective fails instead of waiting."""
    names, prefix = two_hosts
    make = "from gshmem import _C; print(_C.unique_id_create('10.251.0.1', 0, False).hex())"
    uid = subprocess.run([*prefix[0], sys.executable, "-c", make], check=True,
                         capture_output=True, text=True).stdout.strip()  # fmt: skip
    procs = [subprocess.Popen([*prefix[r], sys.executable, WORKER, uid, str(r), "2", "60", "watch"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(2)]  # fmt: skip
    for p in procs:
        assert json.loads(p.stdout.readline())["connected"]
    begin = time.monotonic()
    link = "vg" + names[1][3:]  # the fixture's veth end inside rank 1's namespace
    subprocess.run(["ip", "-n", names[1], "link", "set", link, "down"], check=True)
    results = [outcome(p)["result"] for p in procs]
    assert time.monotonic() - begin < 25.0
    assert results[0]["closed"] == 1 and results[1]["closed"] == 0, results
    assert all(res["next"].split(":")[0] in ("BootstrapError", "FaultError") for res in results)


def test_nranks_disagreement_is_a_usage_error():
    uid = new_uid()
    a, b = start(uid, 0, 2, "connect-only"), start(uid, 1, 3, "connect-only")
    for res in (outcome(a), outcome(b)):
        assert res["error"] == "UsageError"
        assert "nranks=3" in res["msg"]


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def gshmem_listeners() -> list[str]:
    """This process's listening gshmem Unix sockets (/proc/net/unix flag 00010000 = listening)."""
    mine = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            mine.add(target[8:-1])
    with open("/proc/net/unix") as f:
        rows = [line.split() for line in f][1:]
    return [
        r[-1]
        for r in rows
        if len(r) >= 8 and r[6] in mine and r[3] == "00010000" and "gshmem-" in r[-1]
    ]


def test_failures_leave_nothing_behind():
    before = open_fds()
    # A timed-out bootstrap (rank 1 never comes) inside this process, twice.
    for _ in range(2):
        with pytest.raises(TimeoutError):
            _C.BootstrapHandle(_C.unique_id_create("127.0.0.1", 0, True), 0, 2, 0.5)
    # A complete group with a local channel, closed again.
    uid = _C.unique_id_create("127.0.0.1", 0, True)
    handles = [None, None]

    def member(r: int) -> None:
        h = _C.BootstrapHandle(uid, r, 2, 5.0)
        h.connect_local([0, 1])
        handles[r] = h

    threads = [threading.Thread(target=member, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert all(handles)
    assert not gshmem_listeners(), "listening names must be gone once the mesh is connected"
    for h in handles:
        h.close()
    assert open_fds() == before


def test_bad_unique_ids_are_usage_errors():
    with pytest.raises(UsageError, match="64 bytes"):
        _C.BootstrapHandle(b"short", 0, 1, 1.0)
    with pytest.raises(UsageError, match="not a gshmem unique id"):
        _C.BootstrapHandle(bytes(64), 0, 1, 1.0)
    with pytest.raises(UsageError, match="outside"):
        _C.BootstrapHandle(new_uid(), 2, 2, 1.0)


def test_unique_id_describes_its_rendezvous():
    uid = _C.unique_id_create("127.0.0.1", 0, True)
    host, port = _C.unique_id_describe(uid).split(":")
    assert host == "127.0.0.1" and 0 < int(port) < 65536
    assert _C.unique_id_create("127.0.0.1", 0, True)[SECRET] != uid[SECRET]


def test_a_port_on_paper_is_drawn_below_the_ephemeral_range():
    """listen=False with port 0 (a launcher's id for rank 0 to bind later): the port is free
    now and below the kernel's ephemeral range, where no outgoing connection takes it before
    rank 0 binds it; rank 0's comm then binds and uses it."""
    from gshmem import tcp_ports

    ephemeral = tcp_ports.ephemeral_ports()
    if not ephemeral or ephemeral[0] - tcp_ports.LOWEST_DRAWN_PORT < 1024:
        pytest.skip("no room below this host's ephemeral range")
    ports = set()
    for _ in range(8):
        uid = _C.unique_id_create("127.0.0.1", 0, False)
        port = int(_C.unique_id_describe(uid).rsplit(":", 1)[1])
        assert tcp_ports.LOWEST_DRAWN_PORT <= port < ephemeral[0], port
        ports.add(port)
    assert len(ports) > 1  # drawn, not one fixed port
    h = _C.BootstrapHandle(uid, 0, 1, 5.0)  # rank 0 of a job of one binds the last one
    assert bytes(h.allgather(b"x")) == b"x"
    h.close()


def test_bootstrap_error_is_a_gshmem_error():
    assert issubclass(BootstrapError, Error) and issubclass(TimeoutError, BootstrapError)


def test_local_channel_rejects_a_peer_that_grows_differently():
    # The heap passes every new chunk with a tag (offset, size); a PE whose tag differs made
    # different allocation calls, which must be a HeapError, not silent corruption.
    uid = _C.unique_id_create("127.0.0.1", 0, True)
    errors: list[str] = ["", ""]

    def member(r: int) -> None:
        h = _C.BootstrapHandle(uid, r, 2, 5.0)
        h.connect_local([0, 1])
        fd = os.memfd_create(f"chunk{r}")
        try:
            got = h.exchange_fd(fd, 100 + r)  # the tags differ
            for f in got:
                if f >= 0:
                    os.close(f)
        except HeapError as e:
            errors[r] = str(e)
        finally:
            os.close(fd)
            h.close()

    threads = [threading.Thread(target=member, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert "rank 1 grew its heap differently from rank 0" in errors[0]
    assert "rank 0 grew its heap differently from rank 1" in errors[1]
