"""gshmem.launch.detect(): every method, proven by a bootstrap allgather among the ranks it found.

Multi-process cases run ``_helpers_launch.py`` in each rank; it calls ``detect()`` twice (the
second time with a key), connects ``_C.BootstrapHandle`` with each id and prints what every rank
saw. Only 127.0.0.1 is used.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib.util
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import gshmem
from gshmem import _C, launch
from gshmem.tcp_ports import free_port

HELPER = Path(__file__).with_name("_helpers_launch.py")
SKIP_EXIT = 77

# Everything detect() reads from the environment; scrubbed before each test.
LAUNCH_VARS = (
    "GSHMEM_UNIQUE_ID",
    "GSHMEM_RANK",
    "GSHMEM_WORLD_SIZE",
    "GSHMEM_LOCAL_RANK",
    "GSHMEM_LOCAL_WORLD_SIZE",
    "GSHMEM_BOOTSTRAP_ADDR",
    "GSHMEM_DEBUG",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_USE_AGENT_STORE",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_RUN_ID",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "PMI_SIZE",
    "PMI_RANK",
    "PMIX_RANK",
    "MPI_LOCALRANKID",
    "MPI_LOCALNRANKS",
    "SLURM_PROCID",
    "SLURM_STEP_NUM_TASKS",
    "SLURM_NTASKS",
    "SLURM_RESTART_COUNT",
)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in LAUNCH_VARS:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("GSHMEM_TIMEOUT", "10")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
    env.update(GSHMEM_TIMEOUT="10", PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


def _free_port(pair: bool = False) -> int:
    """A free loopback port (and, with pair, port+1 free too), drawn as the launcher draws its
    own (below the ephemeral range: no connection of a parallel test takes it meanwhile)."""
    for _ in range(50):
        port = free_port()
        if not pair:
            return port
        with socket.socket() as s, contextlib.suppress(OSError):
            s.bind(("127.0.0.1", port + 1))
            return port
    raise RuntimeError("no free port pair")


# -- running ranks --------------------------------------------------------------------------------


def _results(stdout: str) -> dict[int, dict]:
    """The RESULT lines of a run, by rank (lines may carry a launcher's "[rank r] " prefix)."""
    out = {}
    for line in stdout.splitlines():
        if "RESULT " in line:
            res = json.loads(line.split("RESULT ", 1)[1])
            out[res["me"]] = res
    return out


def _results_in(folder: Path) -> dict[int, dict]:
    return _results("".join(p.read_text() for p in sorted(folder.glob("rank*.out"))))


def _run_ranks(
    tmp_path: Path, jobs: list[tuple[list[str], dict[str, str]]], timeout: float = 90
) -> dict[int, dict]:
    """Starts one helper process per job, waits for all (bounded), returns their results."""
    procs = []
    for i, (args, env) in enumerate(jobs):
        out, err = tmp_path / f"rank{i}.out", tmp_path / f"rank{i}.err"
        with open(out, "w") as fo, open(err, "w") as fe:
            procs.append(
                subprocess.Popen(
                    [sys.executable, str(HELPER), *args],
                    env=env,
                    stdout=fo,
                    stderr=fe,
                    start_new_session=True,
                )
            )
    try:
        _wait_all(procs, timeout)
    finally:
        _kill_all(procs)
    codes = [p.returncode for p in procs]
    errs = [(tmp_path / f"rank{i}.err").read_text() for i in range(len(procs))]
    if SKIP_EXIT in codes:
        reason = next(e for e, c in zip(errs, codes, strict=True) if c == SKIP_EXIT)
        pytest.skip(reason.strip().splitlines()[-1])
    assert codes == [0] * len(procs), "\n\n".join(errs)
    return _results_in(tmp_path)


def _wait_all(procs: list[subprocess.Popen[bytes]], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pytest.fail(f"ranks still running after {timeout} s")


def _kill_all(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, 9)
            p.wait(timeout=10)


def _check(
    results: dict[int, dict],
    nranks: int,
    method: str,
    local: list[tuple[int, int]] | None = None,
    loopback: bool = True,
) -> None:
    """Every rank saw the same ids (one per call, distinct), and the right place in the job."""
    assert sorted(results) == list(range(nranks))
    local = local or [(r, nranks) for r in range(nranks)]
    uids = []
    for call in ("first", "second"):
        views = [results[r][call] for r in range(nranks)]
        assert all(v == views[0] for v in views)  # the allgather succeeded with the same data
        seen = views[0]
        assert [s["rank"] for s in seen] == list(range(nranks))
        assert {s["uid"] for s in seen} == {seen[0]["uid"]}
        assert all(s["nranks"] == nranks and s["method"] == method for s in seen)
        assert [(s["local_rank"], s["local_size"]) for s in seen] == local
        if loopback:
            assert seen[0]["rendezvous"].startswith("127.0.0.1:")
        uids.append(seen[0]["uid"])
    assert uids[0] != uids[1], "a second detect() must give a fresh id"


# -- single process -------------------------------------------------------------------------------


def test_single_process() -> None:
    got = launch.detect()
    assert (got.rank, got.nranks, got.local_rank, got.local_size) == (0, 1, 0, 1)
    assert got.method == "single"
    assert got.rendezvous.startswith("127.0.0.1:")
    assert "uid" not in repr(got)  # the secret stays out of logs
    bs = _C.BootstrapHandle(got.uid, 0, 1, 10.0)
    assert bs.allgather(b"x") == b"x"
    bs.close()
    assert launch.detect(rank=0, nranks=1).method == "single"


def test_explicit() -> None:
    uid = _C.unique_id_create("127.0.0.1", 0, listen=False)
    got = launch.detect(uid, 1, 3)
    assert (got.uid, got.rank, got.nranks, got.method) == (uid, 1, 3, "explicit")
    assert (got.local_rank, got.local_size) == (-1, -1)  # unknown: the comm finds out
    assert (launch.detect(uid, 0, 1).local_rank, launch.detect(uid, 0, 1).local_size) == (0, 1)


def test_explicit_local_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    uid = _C.unique_id_create("127.0.0.1", 0, listen=False)
    got = launch.detect(uid, 3, 4)
    assert (got.local_rank, got.local_size) == (1, 2)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"rank": 0}, "rank was given without the other"),
        ({"nranks": 2}, "nranks was given without the other"),
        ({"uid": "make"}, "uid was given without rank and nranks"),
        ({"uid": b"short", "rank": 0, "nranks": 1}, "64 bytes"),
        ({"uid": bytes(64), "rank": 0, "nranks": 1}, "not a gshmem unique id"),
        ({"uid": "make", "rank": 2, "nranks": 2}, r"outside \[0, 2\)"),
        ({"uid": "make", "rank": 0, "nranks": 0}, "at least 1"),
        ({"rank": 1, "nranks": 2}, "no launcher was found"),
    ],
)
def test_bad_arguments(kwargs: dict, match: str) -> None:
    if kwargs.get("uid") == "make":
        kwargs["uid"] = _C.unique_id_create("127.0.0.1", 0, listen=False)
    with pytest.raises(gshmem.UsageError, match=match):
        launch.detect(**kwargs)


def test_address_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple] = []
    monkeypatch.setattr(launch._C, "unique_id_create", lambda *a, **k: calls.append((a, k)))
    launch._rank0_uid(single_host=True)
    launch._rank0_uid(single_host=False)
    monkeypatch.setenv("GSHMEM_BOOTSTRAP_ADDR", "127.0.0.1")
    launch._rank0_uid(single_host=True)
    assert [a[0] for a, _ in calls] == ["127.0.0.1", None, None]
    assert all(k == {"listen": True} for _, k in calls)


def test_debug_line_reaches_stderr() -> None:
    code = "from gshmem.launch import detect; detect()"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env=_env(GSHMEM_DEBUG="1"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "method=single rank=0/1" in proc.stderr
    quiet = subprocess.run(
        [sys.executable, "-c", code], env=_env(), capture_output=True, text=True, timeout=60
    )
    assert "method=" not in quiet.stderr


def test_debug_log_record(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="gshmem"):
        launch.detect()
    assert any("method=single" in r.getMessage() for r in caplog.records)


# -- gshmem.run -----------------------------------------------------------------------------------


def test_gshmem_run_env(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gshmem.run", "-n", "3", "--timeout", "60", str(HELPER), "plain"],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert proc.returncode == 0, proc.stderr
    _check(_results(proc.stdout), 3, "gshmem.run")


@pytest.mark.parametrize(
    "env, match",
    [
        ({"GSHMEM_UNIQUE_ID": "zz"}, "not hexadecimal"),
        ({"GSHMEM_UNIQUE_ID": "00" * 10, "GSHMEM_RANK": "0", "GSHMEM_WORLD_SIZE": "1"}, "64 bytes"),
        ({"GSHMEM_UNIQUE_ID": "good"}, "GSHMEM_RANK/GSHMEM_WORLD_SIZE are not"),
        ({"GSHMEM_UNIQUE_ID": "good", "GSHMEM_RANK": "x", "GSHMEM_WORLD_SIZE": "2"}, "integer"),
        ({"GSHMEM_UNIQUE_ID": "good", "GSHMEM_RANK": "2", "GSHMEM_WORLD_SIZE": "2"}, "outside"),
    ],
)
def test_gshmem_run_env_malformed(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], match: str
) -> None:
    good = _C.unique_id_create("127.0.0.1", 0, listen=False).hex()
    for k, v in env.items():
        monkeypatch.setenv(k, good if v == "good" else v)
    with pytest.raises(gshmem.UsageError, match=match):
        launch.detect()


# -- torchrun's environment -----------------------------------------------------------------------


def _torchrun_jobs(n: int, port: int, local_world: int, **extra: str) -> list:
    jobs = []
    for r in range(n):
        env = _env(
            RANK=str(r),
            WORLD_SIZE=str(n),
            LOCAL_RANK=str(r % local_world),
            LOCAL_WORLD_SIZE=str(local_world),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            **extra,
        )
        jobs.append((["plain"], env))
    return jobs


def test_torchrun_env_rank0_hosts_store(tmp_path: Path) -> None:
    pytest.importorskip("torch.distributed")
    port = _free_port(pair=True)
    _check(_run_ranks(tmp_path, _torchrun_jobs(3, port, 3)), 3, "torchrun-env")


def test_torchrun_env_several_hosts(tmp_path: Path) -> None:
    """LOCAL_WORLD_SIZE < WORLD_SIZE: not one host, so the native default address is used;
    GSHMEM_BOOTSTRAP_ADDR keeps this test on loopback."""
    pytest.importorskip("torch.distributed")
    port = _free_port(pair=True)
    jobs = _torchrun_jobs(4, port, 2, GSHMEM_BOOTSTRAP_ADDR="127.0.0.1")
    _check(_run_ranks(tmp_path, jobs), 4, "torchrun-env", local=[(0, 2), (1, 2), (0, 2), (1, 2)])


@contextlib.contextmanager
def _agent_store() -> Iterator[int]:
    """A TCPStore standing in for torchrun's agent store; yields its port."""
    dist = pytest.importorskip("torch.distributed")
    store = dist.TCPStore(
        "127.0.0.1", 0, None, True, datetime.timedelta(seconds=30), wait_for_workers=False
    )
    try:
        yield store.port
    finally:
        del store


def test_torchrun_env_agent_store(tmp_path: Path) -> None:
    with _agent_store() as port:
        jobs = _torchrun_jobs(
            2, port, 2, TORCHELASTIC_USE_AGENT_STORE="True", TORCHELASTIC_RESTART_COUNT="0"
        )
        _check(_run_ranks(tmp_path, jobs), 2, "torchrun-env")


def test_torchrun_env_timeout_names_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 1 alone: rank 0 never publishes, so the wait times out with a clear error."""
    with _agent_store() as port:
        for k, v in dict(
            RANK="1", WORLD_SIZE="2", LOCAL_RANK="1", LOCAL_WORLD_SIZE="2",
            MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), TORCHELASTIC_USE_AGENT_STORE="True",
            GSHMEM_TIMEOUT="1",
        ).items():  # fmt: skip
            monkeypatch.setenv(k, v)
        with pytest.raises(gshmem.TimeoutError, match=r"torchrun-env: key '.*/uid'"):
            launch.detect()


# -- srun's environment --------------------------------------------------------------------------


def test_srun_env_tasks_find_each_other(tmp_path: Path) -> None:
    """srun's tasks (SLURM_PROCID, SLURM_STEP_NUM_TASKS) with the job's MASTER_ADDR/PORT: rank 0
    hosts the store at MASTER_PORT+1; locality comes from the tasks' host ids."""
    pytest.importorskip("torch.distributed")
    port = _free_port(pair=True)
    jobs = [(["plain"], _env(SLURM_PROCID=str(r), SLURM_STEP_NUM_TASKS="3", SLURM_NTASKS="3",
                             MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)))
            for r in range(3)]  # fmt: skip
    _check(_run_ranks(tmp_path, jobs), 3, "srun-env")


def test_srun_env_without_a_rendezvous_address_says_what_to_export(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for k, v in dict(SLURM_PROCID="1", SLURM_STEP_NUM_TASKS="4", MASTER_PORT="29500").items():
        monkeypatch.setenv(k, v)
    with pytest.raises(gshmem.UsageError, match=r"srun started 4 tasks.*MASTER_ADDR="):
        launch.detect()


@pytest.mark.parametrize(
    "slurm",
    [
        {"SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "1", "SLURM_NTASKS": "8"},  # srun -n 1
        {"SLURM_PROCID": "0", "SLURM_NTASKS": "8"},  # a batch script: no job step of tasks
    ],
)
def test_one_slurm_process_is_a_job_of_one(monkeypatch: pytest.MonkeyPatch, slurm) -> None:
    for k, v in slurm.items():
        monkeypatch.setenv(k, v)
    got = launch.detect()
    assert (got.method, got.rank, got.nranks) == ("single", 0, 1)


def test_real_torchrun(tmp_path: Path) -> None:
    torchrun = shutil.which("torchrun")
    if torchrun is None:
        pytest.skip("torchrun is not installed")
    proc = subprocess.run(
        [torchrun, "--standalone", "--nproc-per-node", "2", str(HELPER), "plain"],
        env=_env(LAUNCH_TEST_RESULT_DIR=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    _check(_results_in(tmp_path), 2, "torchrun-env")


# -- torch.distributed ----------------------------------------------------------------------------


@pytest.mark.parametrize("local_from", ["hostnames", "env"])
def test_torch_distributed(tmp_path: Path, local_from: str) -> None:
    pytest.importorskip("torch.distributed")
    port = _free_port()
    jobs = []
    for r in range(2):
        extra = {}
        if local_from == "env":  # as if each rank were alone on its host: what the hostnames
            # cannot give, so the result shows the environment was read
            extra = dict(RANK=str(r), WORLD_SIZE="2", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
                         GSHMEM_BOOTSTRAP_ADDR="127.0.0.1")  # fmt: skip
        jobs.append((["torch", str(r), "2", str(port)], _env(**extra)))
    local = [(0, 1), (0, 1)] if local_from == "env" else None
    _check(_run_ranks(tmp_path, jobs), 2, "torch.distributed", local=local)


# -- jax.distributed ------------------------------------------------------------------------------


def test_jax_distributed(tmp_path: Path) -> None:
    if importlib.util.find_spec("jax") is None:
        pytest.skip("jax is not installed")
    port = _free_port()
    jobs = [(["jax", str(r), "2", str(port)], _env(JAX_PLATFORMS="cpu")) for r in range(2)]
    _check(_run_ranks(tmp_path, jobs), 2, "jax.distributed")


# -- MPI ------------------------------------------------------------------------------------------

FAKE_MPI = """
    # A stand-in for mpi4py: ranks from the environment, bcast through files.
    import os, pickle, time

    COMM_TYPE_SHARED = 1
    _DIR = os.environ["FAKE_MPI_DIR"]

    def Is_initialized():
        return True

    class _Comm:
        def __init__(self, rank, size):
            self._rank, self._size, self._seq = rank, size, 0

        def Get_rank(self):
            return self._rank

        def Get_size(self):
            return self._size

        def Split_type(self, kind, key=0):
            assert kind == COMM_TYPE_SHARED
            local = [int(x) for x in os.environ["FAKE_MPI_HOSTS"].split(",")]
            mine = local[self._rank]
            return _Comm(local[: self._rank].count(mine), local.count(mine))

        def Free(self):
            pass

        def bcast(self, obj, root=0):
            path = os.path.join(_DIR, f"bcast{self._seq}")
            self._seq += 1
            if self._rank == root:
                with open(path + ".tmp", "wb") as f:
                    pickle.dump(obj, f)
                os.replace(path + ".tmp", path)
                return obj
            deadline = time.monotonic() + 20
            while not os.path.exists(path):
                if time.monotonic() > deadline:
                    raise RuntimeError("fake bcast timed out")
                time.sleep(0.01)
            with open(path, "rb") as f:
                return pickle.load(f)

    COMM_WORLD = _Comm(int(os.environ["PMIX_RANK"]), int(os.environ["PMI_SIZE"]))
"""


@pytest.mark.parametrize("local_from", ["ompi-env", "split-type-one-host", "split-type-two-hosts"])
def test_mpi_with_fake_mpi4py(tmp_path: Path, local_from: str) -> None:
    """The MPI adapter's logic against a file-based stand-in for mpi4py (no MPI here)."""
    pkg = tmp_path / "fake" / "mpi4py"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "MPI.py").write_text(textwrap.dedent(FAKE_MPI))
    (tmp_path / "bcast").mkdir()
    n = 4
    hosts = [0, 0, 1, 1] if local_from == "split-type-two-hosts" else [0] * n
    local = [(hosts[:r].count(hosts[r]), hosts.count(hosts[r])) for r in range(n)]
    if local_from == "ompi-env":  # two to a host by the environment, one host by Split_type:
        local = [(r % 2, 2) for r in range(n)]  # the result shows which was read
    jobs = []
    for r in range(n):
        env = _env(
            PYTHONPATH=os.pathsep.join([str(tmp_path / "fake"), os.environ.get("PYTHONPATH", "")]),
            FAKE_MPI_DIR=str(tmp_path / "bcast"),
            FAKE_MPI_HOSTS=",".join(map(str, hosts)),
            PMI_SIZE=str(n),
            PMIX_RANK=str(r),
        )
        if local_from == "ompi-env":
            env.update(OMPI_COMM_WORLD_LOCAL_RANK=str(r % 2), OMPI_COMM_WORLD_LOCAL_SIZE="2")
        if local_from != "split-type-one-host":
            env.update(GSHMEM_BOOTSTRAP_ADDR="127.0.0.1")
        jobs.append((["plain"], env))
    _check(_run_ranks(tmp_path, jobs), n, "mpi", local=local)


def test_mpi_real(tmp_path: Path) -> None:
    mpirun = shutil.which("mpirun")
    if importlib.util.find_spec("mpi4py") is None or mpirun is None:
        pytest.skip("needs mpi4py and mpirun")
    # Open MPI refuses to start as root unless told (GPU hosts run tests as root); other MPIs
    # ignore these variables.
    root = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    proc = subprocess.run(
        [mpirun, "--oversubscribe", "-n", "2", sys.executable, str(HELPER), "plain"],
        env=_env(LAUNCH_TEST_RESULT_DIR=str(tmp_path), **root),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    _check(_results_in(tmp_path), 2, "mpi")


def test_mpi_not_used_without_a_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    """mpi4py alone (no MPI launcher in the environment) must not make detect() use MPI."""
    if "mpi4py.MPI" in sys.modules:
        pytest.skip("MPI is initialized in this process")
    monkeypatch.setattr(launch.importlib.util, "find_spec", lambda name: object())
    assert not launch._mpi_launched()
    monkeypatch.setenv("PMI_SIZE", "2")
    assert launch._mpi_launched()
