"""gshmem.run across hosts (gshmem.run_hosts): the host list, placement, the remote command, and
real jobs whose ranks start through a remote shell: a stand-in on this host, and `ip netns exec`
into two network namespaces (two "hosts" joined by a veth pair) where the bootstrap and UCX
traffic cross the network."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from _netns import ADDRESSES, two_hosts_fixture  # noqa: F401  (the two_hosts fixture)

from gshmem import _ucx, run, run_hosts

WORKER = str(Path(__file__).with_name("net_worker.py"))


def test_parse_hosts_and_placement():
    hosts = run_hosts.parse_hosts("a:2, b, c:3")
    assert hosts == [("a", 2), ("b", 1), ("c", 3)]
    slots = run_hosts.place(hosts)
    assert [(s.host, s.local_rank, s.local_size) for s in slots] == [
        ("a", 0, 2), ("a", 1, 2), ("b", 0, 1), ("c", 0, 3), ("c", 1, 3), ("c", 2, 3)]  # fmt: skip
    for bad, why in [("a:0", "positive"), ("a:x", "positive"), ("a,,b", "empty"),
                     ("a:1,a:2", "twice")]:  # fmt: skip
        with pytest.raises(ValueError, match=why):
            run_hosts.parse_hosts(bad)


def test_rendezvous_address(monkeypatch):
    monkeypatch.delenv("GSHMEM_BOOTSTRAP_ADDR", raising=False)
    assert run_hosts.rendezvous([("localhost", 1)], None) == "127.0.0.1"
    assert run_hosts.rendezvous([("localhost", 1)], "10.0.0.7") == "10.0.0.7"
    monkeypatch.setenv("GSHMEM_BOOTSTRAP_ADDR", "10.0.0.9")
    assert run_hosts.rendezvous([("localhost", 1)], None) == "10.0.0.9"
    assert run_hosts.rendezvous([("localhost", 1)], "10.0.0.7") == "10.0.0.7"  # the flag wins
    monkeypatch.delenv("GSHMEM_BOOTSTRAP_ADDR")
    with pytest.raises(ValueError, match="--bootstrap-addr"):
        run_hosts.rendezvous([("no-such-host.invalid", 1)], None)


def test_remote_command_quotes_once_for_the_remote_shell():
    env = {"A": "x y", "B": "it's"}
    ssh = run_hosts.remote_command("ssh -o BatchMode=yes", "n1", env, ["py", "s.py", "a b"], "/w d")
    assert ssh[:3] == ["ssh", "-o", "BatchMode=yes"] and ssh[3] == "n1" and len(ssh) == 5
    # what the remote shell does with the line: cd, then env with each word intact
    words = shlex.split(ssh[4])
    assert words[:4] == ["cd", "/w d", "&&", "exec"]
    assert words[4:] == ["env", "A=x y", "B=it's", "py", "s.py", "a b"]
    netns = run_hosts.remote_command("ip netns exec {host} sh -c", "ns1", {}, ["py"], "/w")
    assert netns == ["ip", "netns", "exec", "ns1", "sh", "-c", "cd /w && exec env py"]


def test_usage_errors_with_hosts():
    for argv, why in [
        (["--hosts", "a:2", "-n", "3", "x.py"], "has 2 slots"),
        # argparse's usage line names every option: match the messages themselves
        (["x.py"], "error: give -n N (ranks on this host) or --hosts"),
        (["--hosts", "a:2", "--port", "70000", "x.py"], "error: --port must be in 1..65535"),
        (["--hosts", "a:q", "x.py"], "positive"),
    ]:
        proc = subprocess.run([sys.executable, "-m", "gshmem.run", *argv], capture_output=True,
                              text=True, timeout=60)  # fmt: skip
        assert proc.returncode == 2 and why in proc.stderr, (argv, proc.stderr)


def launch(argv: list[str], env: dict | None = None, timeout: float = 90) -> list[dict]:
    """Runs `python -m gshmem.run ARGV`; returns each rank's JSON result, by rank."""
    proc = subprocess.run([sys.executable, "-m", "gshmem.run", "--timeout", "60", *argv],
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = {}
    for line in proc.stdout.splitlines():
        tag, _, rest = line.partition("] ")
        if rest.startswith("{"):
            results[int(tag.removeprefix("[rank "))] = json.loads(rest)
    return [results[r] for r in sorted(results)]


def test_ranks_start_through_the_remote_shell_on_their_hosts():
    # The stand-in remote shell runs the line here and tells the rank which host it is on.
    rsh = "env GSHMEM_FAKE_HOST={host} sh -c"
    out = launch(["--hosts", "alpha:2,beta:1", "--rsh", rsh, "--bootstrap-addr", "127.0.0.1",
                  WORKER, "env", "where"])  # fmt: skip
    assert len(out) == 3 and all(r["ok"] for r in out), out
    seen = out[0]["result"]["ranks"]
    assert [(r["host"], r["local_rank"], r["local_size"]) for r in seen] == [
        ("alpha", 0, 2), ("alpha", 1, 2), ("beta", 0, 1)]  # fmt: skip


def test_child_env_of_a_remote_rank():
    slot = run_hosts.Slot("b", 1, 3)
    env = run.child_env({"UCX_TLS": "tcp"}, b"\x01" * 4, 4, 6, None, slot)
    assert env["GSHMEM_RANK"] == "4" and env["GSHMEM_WORLD_SIZE"] == "6"
    assert env["GSHMEM_LOCAL_RANK"] == "1" and env["GSHMEM_LOCAL_WORLD_SIZE"] == "3"
    assert env["UCX_TLS"] == "tcp" and env["NCCL_NVLS_ENABLE"] == "0"
    assert run_hosts.forwarded({"UCX_TLS": "tcp", "HOME": "/root", "GSHMEM_X": "1"}) == {
        "UCX_TLS": "tcp", "GSHMEM_X": "1"}  # fmt: skip


@pytest.mark.skipif(_ucx.wheel_library() is None, reason="no UCX here (pip install libucx-cu13)")
def test_a_job_across_two_network_namespaces(two_hosts):
    names, _ = two_hosts
    hosts = f"{names[0]}:2,{names[1]}:2"
    # UCX_TLS travels with the ranks (forwarded): the data must cross the veth, not shared memory.
    out = launch(["--hosts", hosts, "--rsh", "ip netns exec {host} sh -c", "--bootstrap-addr",
                  ADDRESSES[0], WORKER, "env", "where,rma"], env={"UCX_TLS": "tcp"})  # fmt: skip
    assert len(out) == 4 and all(r["ok"] and r["result"]["errors"] == [] for r in out), out
    where = launch(["--hosts", hosts, "--rsh", "ip netns exec {host} sh -c", "--bootstrap-addr",
                    ADDRESSES[0], WORKER, "env", "where"])[0]["result"]["ranks"]  # fmt: skip
    spaces = [r["netns"] for r in where]
    assert spaces[0] == spaces[1] != spaces[2] == spaces[3], where
    assert [(r["local_rank"], r["local_size"]) for r in where] == [(0, 2), (1, 2)] * 2
