"""The single-host launcher `python -m gshmem.run` (CPU only: children prove their ids with the
TCP bootstrap over loopback)."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from gshmem import run, tcp_ports

LAUNCH_VARS = (
    "GSHMEM_UNIQUE_ID",
    "GSHMEM_RANK",
    "GSHMEM_WORLD_SIZE",
    "GSHMEM_LOCAL_RANK",
    "GSHMEM_LOCAL_WORLD_SIZE",
    "GSHMEM_DEVICE",
    "GSHMEM_BOOTSTRAP_ADDR",
    "GSHMEM_RUN_TIMEOUT",
    "GSHMEM_BENCH_PORT",
    *run.MULTICAST_OFF,
)

ENV_SCRIPT = """
import json, os, sys
from gshmem import _C
r, n = int(os.environ["GSHMEM_RANK"]), int(os.environ["GSHMEM_WORLD_SIZE"])
uid = bytes.fromhex(os.environ["GSHMEM_UNIQUE_ID"])
bs = _C.BootstrapHandle(uid, r, n, 10.0)
gathered = list(bs.allgather(bytes([r])))
bs.close()
env = {k: os.environ.get(k) for k in %r}
print("ENV " + json.dumps({"env": env, "gathered": gathered, "argv": sys.argv[1:],
                           "rendezvous": _C.unique_id_describe(uid)}))
print("to-stderr", file=sys.stderr)
""" % (LAUNCH_VARS,)  # noqa: UP031

# Rank 0 starts a grandchild and sleeps; rank 1 fails once both pids are on disk.
FAIL_SCRIPT = """
import os, subprocess, sys, time
rank, pids = int(os.environ["GSHMEM_RANK"]), sys.argv[1]
if rank == 0:
    gc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    with open(pids + ".tmp", "w") as f:
        f.write(f"{os.getpid()} {gc.pid}")
    os.replace(pids + ".tmp", pids)
    time.sleep(60)
else:
    deadline = time.monotonic() + 20
    while not os.path.exists(pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    sys.exit(3)
"""

SLEEP_SCRIPT = """
import os, sys, time
print(f"ready {os.getpid()}", flush=True)
time.sleep(60)
"""


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
    env.update(GSHMEM_TIMEOUT="10", PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


def _launch(
    args: list[str], env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gshmem.run", *args],
        env=env or _env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _script(tmp_path: Path, text: str, name: str = "child.py") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def _gone(pid: int, wait: float = 5.0) -> bool:
    """True once ``pid`` no longer runs (absent, or a zombie nobody reaps)."""
    deadline = time.monotonic() + wait
    while True:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def _records(stdout: str, tag: str) -> dict[int, dict]:
    out = {}
    for line in stdout.splitlines():
        if line.startswith("[rank ") and f"] {tag} " in line:
            head, body = line.split(f"] {tag} ", 1)
            out[int(head[len("[rank ") :])] = json.loads(body)
    return out


@pytest.mark.parametrize("n", [1, 2, 4])
def test_children_get_env_and_a_working_uid(tmp_path: Path, n: int) -> None:
    proc = _launch(["-n", str(n), _script(tmp_path, ENV_SCRIPT), "a", "--flag"])
    assert proc.returncode == 0, proc.stderr
    recs = _records(proc.stdout, "ENV")
    assert sorted(recs) == list(range(n)), proc.stdout
    uids = {rec["env"]["GSHMEM_UNIQUE_ID"] for rec in recs.values()}
    assert len(uids) == 1 and len(bytes.fromhex(uids.pop())) == 64
    for r, rec in recs.items():
        env = rec["env"]
        assert env["GSHMEM_RANK"] == str(r) and env["GSHMEM_LOCAL_RANK"] == str(r)
        assert env["GSHMEM_WORLD_SIZE"] == str(n) and env["GSHMEM_LOCAL_WORLD_SIZE"] == str(n)
        assert env["GSHMEM_DEVICE"] is None
        assert rec["gathered"] == list(range(n))  # every rank connected with the uid
        assert rec["argv"] == ["a", "--flag"]
        assert rec["rendezvous"].startswith("127.0.0.1:")
    # one port for torch.distributed's store, the same on every rank, not the rendezvous's
    ports = {rec["env"]["GSHMEM_BENCH_PORT"] for rec in recs.values()}
    assert len(ports) == 1 and 0 < int(next(iter(ports))) < 65536
    assert all(not rec["rendezvous"].endswith(":" + p) for p in ports for rec in recs.values())
    ephemeral = tcp_ports.ephemeral_ports()
    if ephemeral and ephemeral[0] - tcp_ports.LOWEST_DRAWN_PORT >= 1024:  # both drawn below it
        chosen = [int(next(iter(ports))), int(recs[0]["rendezvous"].rsplit(":", 1)[1])]
        assert all(tcp_ports.LOWEST_DRAWN_PORT <= q < ephemeral[0] for q in chosen), chosen
    # stderr is forwarded separately, prefixed too
    for r in range(n):
        assert f"[rank {r}] to-stderr" in proc.stderr.splitlines()
    assert "to-stderr" not in proc.stdout


def test_multicast_is_off_unless_the_user_set_it(tmp_path: Path) -> None:
    script = _script(tmp_path, ENV_SCRIPT)
    proc = _launch(["-n", "1", script])
    assert proc.returncode == 0, proc.stderr
    env = _records(proc.stdout, "ENV")[0]["env"]
    assert env["NCCL_NVLS_ENABLE"] == "0"
    assert env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    assert env["NVSHMEM_DISABLE_NVLS"] == "1"
    # values other than the launcher's own, so that a kept setting and an overwritten one differ
    # (a CPU-only child: nothing here uses multicast)
    proc = _launch(["-n", "1", script], env=_env(NCCL_NVLS_ENABLE="1", NVSHMEM_DISABLE_NVLS="0"))
    assert proc.returncode == 0, proc.stderr
    env = _records(proc.stdout, "ENV")[0]["env"]
    assert env["NCCL_NVLS_ENABLE"] == "1" and env["NVSHMEM_DISABLE_NVLS"] == "0"
    assert env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"


def test_failing_rank_stops_the_others(tmp_path: Path) -> None:
    pids_file = tmp_path / "pids"
    start = time.monotonic()
    proc = _launch(["-n", "2", _script(tmp_path, FAIL_SCRIPT), str(pids_file)])
    elapsed = time.monotonic() - start
    assert proc.returncode == 3, proc.stderr
    assert "rank 1 exited with code 3" in proc.stderr
    assert elapsed < 30
    rank0, grandchild = (int(p) for p in pids_file.read_text().split())
    assert _gone(rank0), "rank 0 still runs"
    assert _gone(grandchild), "rank 0's child still runs"


@pytest.mark.parametrize("how", ["option", "env"])
def test_timeout_kills_everything_and_exits_124(tmp_path: Path, how: str) -> None:
    script = _script(tmp_path, SLEEP_SCRIPT)
    if how == "option":
        args, env = ["--timeout", "2", "-n", "2", script], _env()
    else:
        args, env = ["-n", "2", script], _env(GSHMEM_RUN_TIMEOUT="2")
    start = time.monotonic()
    proc = _launch(args, env=env)
    assert proc.returncode == run.TIMEOUT_EXIT, proc.stderr
    assert time.monotonic() - start < 20
    assert "timed out after 2 s" in proc.stderr
    pids = [int(line.split()[-1]) for line in proc.stdout.splitlines() if "ready" in line]
    assert len(pids) == 2
    assert all(_gone(p) for p in pids)


def test_module_form(tmp_path: Path) -> None:
    (tmp_path / "gshmem_run_probe.py").write_text(
        "import os, sys\nprint('MOD', os.environ['GSHMEM_RANK'], *sys.argv[1:])\n"
    )
    env = _env(PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    proc = _launch(["-n", "2", "-m", "gshmem_run_probe", "x", "--y"], env=env)
    assert proc.returncode == 0, proc.stderr
    lines = sorted(proc.stdout.splitlines())
    assert lines == ["[rank 0] MOD 0 x --y", "[rank 1] MOD 1 x --y"]


def test_no_tag_output(tmp_path: Path) -> None:
    # Untagged output is the children's own, unbuffered (PYTHONUNBUFFERED=1): print's pieces
    # are separate writes that two ranks may interleave, so each rank writes its line at once.
    script = _script(tmp_path, "import os, sys\n"
                     "sys.stdout.write(f\"plain {os.environ['GSHMEM_RANK']}\\n\")\n")  # fmt: skip
    proc = _launch(["--no-tag-output", "-n", "2", script])
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.splitlines()) == ["plain 0", "plain 1"]


def test_devices(tmp_path: Path) -> None:
    proc = _launch(["-n", "2", "--devices", "3,5", _script(tmp_path, ENV_SCRIPT)])
    assert proc.returncode == 0, proc.stderr
    recs = _records(proc.stdout, "ENV")
    assert [recs[r]["env"]["GSHMEM_DEVICE"] for r in (0, 1)] == ["3", "5"]
    bad = _launch(["-n", "2", "--devices", "0", _script(tmp_path, ENV_SCRIPT)])
    assert bad.returncode == 2 and "give 2 device ordinals" in bad.stderr, bad.stderr


def test_usage_errors() -> None:
    # each by its own message: the usage line, printed with every error, names every option
    for args, why in (
        (["-n", "2"], "error: give the program to run"),
        (["-n", "0", "x.py"], "error: -n must be at least 1, got 0"),
        (["x.py"], "error: give -n N"),
        (["-n", "2", "--timeout", "0", "x.py"], "error: the timeout must be a positive number"),
    ):
        proc = _launch(args)
        assert proc.returncode == 2 and why in proc.stderr, (args, proc.stderr)
    with pytest.raises(SystemExit) as e:
        run.main(["-n", "2"])
    assert e.value.code == 2


def test_split_argv() -> None:
    split = run._split_argv
    assert split(["-n", "2", "s.py", "-n", "3"]) == (["-n", "2"], ["s.py", "-n", "3"])
    assert split(["-n", "2", "-m", "mod", "--x"]) == (["-n", "2"], ["-m", "mod", "--x"])
    assert split(["--no-tag-output", "-n", "2", "--", "-odd.py"]) == (
        ["--no-tag-output", "-n", "2"],
        ["-odd.py"],
    )
    assert split(["--timeout=3", "-n2", "s.py"]) == (["--timeout=3", "-n2"], ["s.py"])


def test_child_env_keeps_user_settings() -> None:
    env = run.child_env({"NCCL_NVLS_ENABLE": "1", "X": "y"}, bytes(64), 2, 4, "1")
    assert env["NCCL_NVLS_ENABLE"] == "1" and env["X"] == "y"
    assert env["GSHMEM_RANK"] == "2" and env["GSHMEM_WORLD_SIZE"] == "4"
    assert env["GSHMEM_DEVICE"] == "1" and env["GSHMEM_UNIQUE_ID"] == "00" * 64


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_is_forwarded(tmp_path: Path, sig: signal.Signals) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "gshmem.run", "-n", "2", _script(tmp_path, SLEEP_SCRIPT)],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        # A thread reads the lines: select() on the pipe misses a second line that readline()
        # already pulled into the file's buffer with the first (both ranks print at once).
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()
        pids: list[int] = []
        deadline = time.monotonic() + 30
        while len(pids) < 2 and (left := deadline - time.monotonic()) > 0:
            try:
                line = lines.get(timeout=left)
            except queue.Empty:
                break
            if "ready" in line:
                pids.append(int(line.split()[-1]))
        assert len(pids) == 2, "the ranks did not start"
        proc.send_signal(sig)
        proc.wait(timeout=30)
        err = proc.stderr.read()
        assert proc.returncode == 128 + sig, err
        assert f"received {sig.name}" in err
        assert all(_gone(p) for p in pids)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def test_wrap_runs_every_rank_under_a_command(tmp_path):
    # The wrapper sees the rank's environment and the python command it must run.
    wrapper = tmp_path / "wrapper.sh"
    wrapper.write_text('#!/bin/sh\necho "wrapped rank $GSHMEM_RANK"\nexec "$@"\n')
    wrapper.chmod(0o755)
    script = tmp_path / "hello.py"
    script.write_text("import os; print('ran', os.environ['GSHMEM_RANK'])\n")
    proc = subprocess.run(
        [sys.executable, "-m", "gshmem.run", "-n", "2", "--wrap", f"{wrapper}", str(script)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    for r in range(2):
        assert f"[rank {r}] wrapped rank {r}" in proc.stdout
        assert f"[rank {r}] ran {r}" in proc.stdout
