"""The comm's watchdog on the CPU (src/core/watchdog.cpp, docs/reliability.md): how a dead peer
process is told from a live one, and what the watchdog thread reports, and when."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from gshmem import _C

PERIOD_MS = 20


def sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def test_liveness_of_this_process_and_of_a_stale_identity():
    me = os.getpid()
    start = _C.process_start_time(me)
    assert start > 0
    assert _C.process_alive(me, start)
    assert _C.process_alive(me, 0)  # start time unknown: the pid alone
    assert not _C.process_alive(me, start + 1)  # same pid, another process (pid reuse)
    assert not _C.process_alive(-1, 0)
    assert not _C.process_alive(0, 0)


def stat_start_time(pid: int) -> int:
    """Field 22 of /proc/<pid>/stat (the start time), read after the command name's last ')'."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rpartition(")")[2].split()[19])


def test_start_time_is_the_stat_field_even_with_parentheses_in_the_name(tmp_path):
    """process_start_time against /proc read here, for this process and for one whose command
    name holds ') ' and spaces (the name is the executable's: a link to python)."""
    assert _C.process_start_time(os.getpid()) == stat_start_time(os.getpid())
    link = tmp_path / "x) y z"
    link.symlink_to(sys.executable)
    child = subprocess.Popen([str(link), "-c", "import time; time.sleep(60)"])
    try:
        for _ in range(100):  # until the child has exec'd (its name is the link's)
            with open(f"/proc/{child.pid}/stat") as f:
                if "(x) y z)" in f.read():
                    break
            time.sleep(0.01)
        start = _C.process_start_time(child.pid)
        assert start == stat_start_time(child.pid) > 0
        assert _C.process_alive(child.pid, start)
    finally:
        child.kill()
        child.wait()


def test_a_killed_peer_is_dead_before_and_after_it_is_reaped():
    child = sleeper()
    try:
        start = _C.process_start_time(child.pid)
        assert _C.process_alive(child.pid, start)
        os.kill(child.pid, signal.SIGKILL)
        for _ in range(100):  # the kernel delivers SIGKILL asynchronously; then a zombie
            if not _C.process_alive(child.pid, start):
                break
            time.sleep(0.01)
        assert not _C.process_alive(child.pid, start), "a killed, unreaped child counted as alive"
    finally:
        child.kill()
        child.wait()
    assert not _C.process_alive(child.pid, start)


def test_the_watchdog_names_a_peer_that_was_killed():
    child = sleeper()
    try:
        probe = _C.WatchdogProbe(3, child.pid, _C.process_start_time(child.pid), PERIOD_MS)
        assert probe.wait(0.3) is None, "fired while the peer was alive"
        killed = time.monotonic()
        os.kill(child.pid, signal.SIGKILL)
        reason = probe.wait(5.0)
        delay = time.monotonic() - killed
    finally:
        child.kill()
        child.wait()
    assert reason is not None, "the watchdog did not notice the peer's death"
    assert f"PE 3 (pid {child.pid}, this host) exited" in reason
    assert delay < 1.0, f"noticed after {delay:.2f} s with a {PERIOD_MS} ms period"


def test_the_watchdog_reports_a_failed_device_wait():
    probe = _C.WatchdogProbe(1, os.getpid(), _C.process_start_time(os.getpid()), PERIOD_MS)
    assert probe.wait(0.1) is None
    probe.fail_device()
    assert probe.wait(5.0) == ""


def test_the_watchdog_reports_a_closed_connection_with_its_message():
    # Peers beyond /proc's reach (other hosts) are seen through the bootstrap's connections.
    probe = _C.WatchdogProbe(1, os.getpid(), _C.process_start_time(os.getpid()), PERIOD_MS)
    assert probe.wait(0.1) is None
    probe.lose_connection("PE 3 (pid 42) closed its bootstrap connection")
    assert probe.wait(5.0) == "PE 3 (pid 42) closed its bootstrap connection"


def test_after_stopping_the_watchdog_keeps_releasing_waits():
    # A ring re-arms its flags (wait, reset, wait again) with the later waits already queued:
    # one release at the stop would leave those blocked, so it releases every period after it.
    probe = _C.WatchdogProbe(1, os.getpid(), _C.process_start_time(os.getpid()), PERIOD_MS)
    time.sleep(0.2)
    assert probe.releases() == 0, "released before anything failed"
    probe.fail_device()
    assert probe.wait(5.0) == ""
    first = probe.releases()
    time.sleep(0.5)
    assert probe.releases() >= first + 5, (first, probe.releases())


def test_a_reused_pid_counts_as_dead():
    me = os.getpid()
    probe = _C.WatchdogProbe(2, me, _C.process_start_time(me) + 1, PERIOD_MS)
    assert "PE 2" in (probe.wait(5.0) or "")
