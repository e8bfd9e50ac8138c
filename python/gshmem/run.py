"""Launcher: ``python -m gshmem.run -n N [options] (script.py | -m module) [args...]``.

Starts N copies of a Python program, one per rank, each with the environment that
``gshmem.launch.detect()`` reads::

    GSHMEM_UNIQUE_ID         the job's unique id (hex); rank 0's comm binds its port
    GSHMEM_RANK, GSHMEM_WORLD_SIZE, GSHMEM_LOCAL_RANK, GSHMEM_LOCAL_WORLD_SIZE
    GSHMEM_DEVICE            this rank's device, only with --devices
    GSHMEM_BENCH_PORT        on one host, unless set: a port that was free when the job started,
                             the same for every rank, for torch.distributed's store (the NCCL
                             baselines' process group, gshmem.bench.nccl_group)

and, unless already set, ``NCCL_NVLS_ENABLE=0``, ``TORCH_SYMM_MEM_DISABLE_MULTICAST=1`` and
``NVSHMEM_DISABLE_NVLS=1`` (NVLink multicast stays off), ``PYTHONUNBUFFERED=1``.

On one host the ports the launcher chooses (rank 0's bootstrap, ``GSHMEM_BENCH_PORT``) are drawn
below the kernel's ephemeral range (gshmem.tcp_ports), so no other connection takes them before
their listeners bind them.

On several hosts: ``--hosts a:4,b:4`` places ranks 0-3 on ``a`` and 4-7 on ``b`` and starts each
through a remote shell (``--rsh``, default ``ssh -o BatchMode=yes``); rank 0's bootstrap listens
on ``--bootstrap-addr`` (default: the first host's address) at ``--port`` (default: a random
one), and every connection presents the job's secret (gshmem.run_hosts says how the remote
command is made). Stopping a rank stops its remote shell; a rank whose peers are gone fails its
next collective within GSHMEM_TIMEOUT.

Each child's stdout and stderr are forwarded line by line to the launcher's, prefixed
``[rank r] `` (``--no-tag-output`` passes them through untouched). Each child runs in its own
process group, so stopping a rank stops what it started. The launcher returns once every
process it started is gone:

- all ranks exit 0: exit 0;
- a rank fails: the others get SIGTERM (SIGKILL after a grace period); exit with the failed
  rank's code (128+signal when it died of a signal);
- ``--timeout`` (or ``GSHMEM_RUN_TIMEOUT``) passes: all ranks are killed; exit 124;
- SIGINT/SIGTERM/SIGHUP to the launcher: forwarded to every rank; exit 128+signal.
"""

from __future__ import annotations

import argparse
import os
import random
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import IO

from gshmem import run_hosts
from gshmem.tcp_ports import free_port, rendezvous_port

__all__ = ["main", "child_env"]

TIMEOUT_EXIT = 124
GRACE_SECONDS = 5.0  # between SIGTERM (or a forwarded signal) and SIGKILL
POLL_SECONDS = 0.05
MULTICAST_OFF = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
_VALUE_OPTIONS = (
    "-n", "--nprocs", "--timeout", "--devices", "--wrap", "--hosts", "--rsh", "--bootstrap-addr",
    "--port",
)  # fmt: skip
_FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _say(message: str) -> None:
    sys.stderr.write(f"gshmem.run: {message}\n")
    sys.stderr.flush()


# -- command line ---------------------------------------------------------------------------------


@dataclass
class Options:
    nprocs: int
    program: list[str]  # what follows sys.executable: [script, *args] or ["-m", module, *args]
    timeout: float | None = None
    devices: list[str] | None = None
    tag_output: bool = True
    wrap: list[str] | None = None  # a command each rank runs under (a sanitizer, a profiler)
    hosts: list[tuple[str, int]] | None = None  # (host, slots), rank 0 on the first
    rsh: str = "ssh -o BatchMode=yes"
    bootstrap_addr: str | None = None
    port: int | None = None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m gshmem.run",
        usage="%(prog)s (-n N | --hosts H:N,...) [--timeout S] [--devices D0,D1,...] "
        "[--[no-]tag-output] (script.py | -m module) [args ...]",
        description="Run N ranks of a gshmem program on this host, or on several.",
    )
    p.add_argument("-n", "--nprocs", type=int, default=None, help="number of ranks")
    p.add_argument("--hosts", default=None, help="HOST[:SLOTS],... : ranks on several hosts")
    p.add_argument(
        "--rsh",
        default="ssh -o BatchMode=yes",
        help='how to run a command on a host ({host} is replaced; default: "ssh -o BatchMode=yes")',
    )
    p.add_argument("--bootstrap-addr", default=None, help="where rank 0 listens (with --hosts)")
    p.add_argument("--port", type=int, default=None, help="rank 0's port (with --hosts)")
    p.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="kill all ranks and exit 124 after this many seconds (default: env "
        "GSHMEM_RUN_TIMEOUT, else none)",
    )
    p.add_argument("--devices", default=None, help="comma-separated device of each rank")
    p.add_argument(
        "--wrap",
        default=None,
        help='run each rank under this command, e.g. --wrap "compute-sanitizer --tool memcheck"',
    )
    p.add_argument(
        "--tag-output",
        action=argparse.BooleanOptionalAction,
        default=True,
        help='prefix each output line with "[rank r] " (default: on)',
    )
    return p


def _split_argv(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Splits the launcher's options from the program (``script ...`` or ``-m module ...``)."""
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            return list(argv[:i]), list(argv[i + 1 :])
        if a == "-m" or not a.startswith("-"):
            return list(argv[:i]), list(argv[i:])
        if a in _VALUE_OPTIONS:
            i += 1  # its value follows
        i += 1
    return list(argv), []


def parse_args(argv: Sequence[str]) -> Options:
    """Parses the command line; exits 2 with a usage message when it is wrong."""
    parser = _parser()
    own, program = _split_argv(argv)
    ns = parser.parse_args(own)
    if not program or program == ["-m"]:
        parser.error("give the program to run: script.py [args] or -m module [args]")
    hosts = None
    if ns.hosts is not None:
        try:
            hosts = run_hosts.parse_hosts(ns.hosts)
        except ValueError as e:
            parser.error(f"--hosts: {e}")
        slots = sum(n for _, n in hosts)
        if ns.nprocs is not None and ns.nprocs != slots:
            parser.error(f"-n {ns.nprocs} but --hosts {ns.hosts!r} has {slots} slots")
        ns.nprocs = slots
    if ns.nprocs is None:
        parser.error("give -n N (ranks on this host) or --hosts HOST:N,...")
    if ns.nprocs < 1:
        parser.error(f"-n must be at least 1, got {ns.nprocs}")
    if ns.port is not None and not 0 < ns.port < 65536:
        parser.error(f"--port must be in 1..65535, got {ns.port}")
    timeout = ns.timeout
    if timeout is None and os.environ.get("GSHMEM_RUN_TIMEOUT"):
        try:
            timeout = float(os.environ["GSHMEM_RUN_TIMEOUT"])
        except ValueError:
            parser.error(f"GSHMEM_RUN_TIMEOUT={os.environ['GSHMEM_RUN_TIMEOUT']!r} is not seconds")
    if timeout is not None and not timeout > 0:
        parser.error(f"the timeout must be a positive number of seconds, got {timeout}")
    devices = None
    if ns.devices is not None:
        devices = [d.strip() for d in ns.devices.split(",")]
        if len(devices) != ns.nprocs or not all(d.isdigit() for d in devices):
            parser.error(
                f"--devices {ns.devices!r}: give {ns.nprocs} device ordinals, one per rank "
                "(for example --devices 0,1)"
            )
    wrap = shlex.split(ns.wrap) if ns.wrap else None
    return Options(ns.nprocs, program, timeout, devices, ns.tag_output, wrap, hosts, ns.rsh,
                   ns.bootstrap_addr, ns.port)  # fmt: skip


# -- children -------------------------------------------------------------------------------------


def child_env(
    base: dict[str, str],
    uid: bytes,
    rank: int,
    nranks: int,
    device: str | None = None,
    slot: run_hosts.Slot | None = None,
) -> dict[str, str]:
    """The environment of one rank: ``base`` plus what ``gshmem.launch.detect()`` reads
    (``slot``: its place on its host, when ranks span several)."""
    env = dict(base)
    env.update(
        GSHMEM_UNIQUE_ID=uid.hex(),
        GSHMEM_RANK=str(rank),
        GSHMEM_WORLD_SIZE=str(nranks),
        GSHMEM_LOCAL_RANK=str(slot.local_rank if slot else rank),
        GSHMEM_LOCAL_WORLD_SIZE=str(slot.local_size if slot else nranks),
    )
    if device is not None:
        env["GSHMEM_DEVICE"] = device
    for k, v in MULTICAST_OFF.items():
        env.setdefault(k, v)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _pdeathsig_setter() -> Callable[[], None] | None:
    """A function for ``preexec_fn`` that makes the child get SIGKILL when the launcher dies
    without cleaning up (Linux). Resolved here, in the parent: after fork only a plain call is
    safe."""
    if sys.platform != "linux":
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig, sigkill = 1, int(signal.SIGKILL)
    return lambda: prctl(pr_set_pdeathsig, sigkill)


def _forward(src: IO[bytes], dst: IO[bytes], prefix: bytes, lock: threading.Lock) -> None:
    """Copies ``src`` to ``dst`` line by line, each line prefixed; ends at EOF."""
    with src:
        for line in iter(src.readline, b""):
            if not line.endswith(b"\n"):
                line += b"\n"
            with lock:
                try:
                    dst.write(prefix + line)
                    dst.flush()
                except (OSError, ValueError):
                    pass  # our own output is gone; keep draining so the child never blocks


@dataclass
class _Rank:
    rank: int
    proc: subprocess.Popen[bytes]
    threads: list[threading.Thread] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return self.proc.poll() is not None


def _spawn(opts: Options, uid: bytes) -> list[_Rank]:
    """Starts every rank, then the threads that forward their output."""
    pipe = subprocess.PIPE if opts.tag_output else None
    preexec = _pdeathsig_setter()
    ranks: list[_Rank] = []
    slots = run_hosts.place(opts.hosts) if opts.hosts else None
    base = dict(os.environ)
    if slots is None:  # one port for the job, not the rendezvous port
        base.setdefault("GSHMEM_BENCH_PORT", str(free_port(avoid=(rendezvous_port(uid),))))
    try:
        for r in range(opts.nprocs):
            device = opts.devices[r] if opts.devices else None
            argv = [*(opts.wrap or []), sys.executable, *opts.program]
            env = child_env(base, uid, r, opts.nprocs, device)
            if slots is not None:  # the remote shell runs it, with the rank's variables
                forwarded = run_hosts.forwarded(os.environ)
                mine = child_env(forwarded, uid, r, opts.nprocs, device, slots[r])
                argv = run_hosts.remote_command(opts.rsh, slots[r].host, mine, argv, os.getcwd())
            proc = subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=pipe,
                stderr=pipe,
                start_new_session=True,  # own process group: killpg reaches grandchildren
                preexec_fn=preexec,
            )
            ranks.append(_Rank(r, proc))
    except BaseException:
        _stop(ranks, signal.SIGTERM)
        raise
    if opts.tag_output:
        locks = (threading.Lock(), threading.Lock())  # stdout, stderr
        for r in ranks:
            prefix = f"[rank {r.rank}] ".encode()
            assert r.proc.stdout is not None and r.proc.stderr is not None
            for src, dst, lock in (
                (r.proc.stdout, sys.stdout.buffer, locks[0]),
                (r.proc.stderr, sys.stderr.buffer, locks[1]),
            ):
                t = threading.Thread(target=_forward, args=(src, dst, prefix, lock), daemon=True)
                t.start()
                r.threads.append(t)
    return ranks


def _signal_groups(ranks: Sequence[_Rank], sig: int) -> None:
    for r in ranks:
        try:
            os.killpg(r.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass  # the group is empty already


def _live_groups(pgids: set[int]) -> set[int]:
    """Those of ``pgids`` that still have a member that is not a zombie. (Zombies count as gone:
    orphans are reparented to init, which in some containers never reaps them.)"""
    if not pgids:
        return set()
    if not os.path.isdir("/proc/self"):  # no procfs: ask the kernel, zombies included
        alive = set()
        for g in pgids:
            try:
                os.killpg(g, 0)
                alive.add(g)
            except (ProcessLookupError, PermissionError):
                pass
        return alive
    alive = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()  # state, ppid, pgrp, ...
        if len(fields) > 2 and fields[0] not in (b"Z", b"X") and int(fields[2]) in pgids:
            alive.add(int(fields[2]))
    return alive


def _running(ranks: Sequence[_Rank]) -> list[_Rank]:
    """Ranks whose process, or anything left in its process group, still runs."""
    groups = _live_groups({r.proc.pid for r in ranks})
    return [r for r in ranks if not r.done or r.proc.pid in groups]


def _stop(ranks: Sequence[_Rank], sig: int, grace: float = GRACE_SECONDS) -> None:
    """Sends ``sig`` to every rank's process group, then SIGKILL to what is left after
    ``grace`` seconds; returns when all ranks are reaped and their groups are empty (bounded)."""
    live = _running(ranks)
    if live:
        _signal_groups(live, sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and _running(live):
            time.sleep(POLL_SECONDS)
        live = _running(live)
        _signal_groups(live, signal.SIGKILL)
    for r in ranks:
        try:
            r.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            _say(f"rank {r.rank} (pid {r.proc.pid}) did not exit even after SIGKILL")
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and _running(ranks):
        time.sleep(POLL_SECONDS)
    for r in ranks:
        for t in r.threads:
            t.join(timeout=grace)


def _exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


# -- supervision ----------------------------------------------------------------------------------


class _Signals:
    """Records SIGINT/SIGTERM/SIGHUP sent to the launcher (main thread only) while installed."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self._old: dict[int, object] = {}

    def __enter__(self) -> _Signals:
        if threading.current_thread() is threading.main_thread():
            for s in _FORWARDED_SIGNALS:
                self._old[s] = signal.signal(s, lambda signum, _frame: self.received.append(signum))
        return self

    def __exit__(self, *exc: object) -> None:
        for s, handler in self._old.items():
            signal.signal(s, handler)  # type: ignore[arg-type]


def _supervise(ranks: list[_Rank], timeout: float | None, signals: _Signals) -> int:
    """Waits for the ranks; returns the launcher's exit code. Stops every rank before returning."""
    deadline = None if timeout is None else time.monotonic() + timeout
    forwarded: int | None = None
    forwarded_at = 0.0
    while True:
        if signals.received and forwarded is None:
            forwarded, forwarded_at = signals.received[-1], time.monotonic()
            name = signal.Signals(forwarded).name
            _say(f"received {name}; forwarding it to all ranks")
            _signal_groups([r for r in ranks if not r.done], forwarded)
        if forwarded is not None:
            if (
                all(r.done for r in ranks)
                or len(signals.received) > 1
                or (time.monotonic() - forwarded_at > GRACE_SECONDS)
            ):
                _stop(ranks, signal.SIGKILL, grace=1.0)
                return 128 + forwarded
        else:
            failed = next((r for r in ranks if r.done and r.proc.returncode != 0), None)
            if failed is not None:
                code = _exit_code(failed.proc.returncode)
                running = [r.rank for r in ranks if not r.done]
                _say(
                    f"rank {failed.rank} exited with code {code}"
                    + (f"; terminating rank(s) {_fmt(running)}" if running else "")
                )
                _stop(ranks, signal.SIGTERM)
                return code
            if all(r.done for r in ranks):
                _stop(ranks, signal.SIGTERM)  # only stray grandchildren, if any
                return 0
            if deadline is not None and time.monotonic() > deadline:
                running = [r.rank for r in ranks if not r.done]
                _say(
                    f"timed out after {timeout:g} s (--timeout / GSHMEM_RUN_TIMEOUT); killing "
                    f"rank(s) {_fmt(running)} still running"
                )
                _stop(ranks, signal.SIGTERM, grace=2.0)
                return TIMEOUT_EXIT
        time.sleep(POLL_SECONDS)


def _fmt(ranks: Sequence[int]) -> str:
    return ", ".join(str(r) for r in ranks)


def main(argv: list[str] | None = None) -> int:
    """Runs the launcher; returns its exit code (see the module docstring)."""
    opts = parse_args(sys.argv[1:] if argv is None else argv)
    from gshmem import _C
    from gshmem._errors import Error

    address = None if os.environ.get("GSHMEM_BOOTSTRAP_ADDR") else "127.0.0.1"
    port = 0  # on this host: drawn by unique_id_create, for rank 0 to bind (tcp_ports.py)
    if opts.hosts:
        # Rank 0's host is not this one: no port can be tried from here, so one is drawn (its
        # bind failing is reported by rank 0, naming the address).
        port = opts.port or random.randint(20000, 60999)
    try:
        if opts.hosts:
            address = run_hosts.rendezvous(opts.hosts, opts.bootstrap_addr)
        uid = _C.unique_id_create(address, port, listen=False)
    except (Error, ValueError) as e:
        _say(f"cannot create the job's unique id: {e}")
        return 1
    with _Signals() as signals:
        try:
            ranks = _spawn(opts, uid)
        except OSError as e:
            _say(f"cannot start {sys.executable} {' '.join(opts.program)}: {e}")
            return 1
        try:
            return _supervise(ranks, opts.timeout, signals)
        finally:
            _stop(ranks, signal.SIGKILL, grace=1.0)  # no-op unless something above raised


if __name__ == "__main__":
    sys.exit(main())
