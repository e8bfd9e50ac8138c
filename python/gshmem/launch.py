"""Find this process's place in the job and the job's UniqueId, from what the launcher set up.

``detect()`` is what ``gshmem.init()`` calls when it is not given a unique id. It tries, in order:

1. ``explicit``: ``uid``, ``rank`` and ``nranks`` were all passed in.
2. ``gshmem.run``: the environment written by ``python -m gshmem.run`` (``GSHMEM_UNIQUE_ID`` ...).
3. ``torch.distributed``: an initialized default process group; the id travels through its store.
4. ``jax.distributed``: an initialized JAX distributed client; the id travels through its
   key-value store.
5. ``mpi``: mpi4py is importable and the job was started by an MPI launcher; ``bcast`` on
   ``COMM_WORLD``.
6. ``torchrun-env``: torchrun's environment without an initialized process group; the id
   travels through a ``torch.distributed.TCPStore`` (torchrun's agent store when it offers one,
   else one hosted by rank 0 at ``MASTER_ADDR:MASTER_PORT+1``).
7. ``srun-env``: a Slurm job step of several tasks (``srun``: ``SLURM_PROCID``,
   ``SLURM_STEP_NUM_TASKS``) without MPI; the id travels as for ``torchrun-env`` through a
   store rank 0 hosts at ``MASTER_ADDR:MASTER_PORT+1``, which the job must export (srun sets
   no rendezvous address of its own).
8. ``single``: none of the above; this process is rank 0 of 1.

Rank 0 creates the id (listening now, so the rank-0 comm created later in this process adopts
the socket). When the adapter can tell that the whole job is on one host, the rendezvous is
127.0.0.1; otherwise (or when ``GSHMEM_BOOTSTRAP_ADDR`` is set) the native default applies.

Every call is collective over the job for every method but ``explicit`` and ``single``: all
ranks must call ``detect()`` the same number of times, in the same order, with the same ``key``.
Waits are bounded by ``GSHMEM_TIMEOUT`` (except MPI's ``bcast``, which has no timeout).
"""

from __future__ import annotations

import datetime
import importlib.util
import logging
import os
import socket
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gshmem import _C
from gshmem._errors import BootstrapError, TimeoutError, UsageError

__all__ = ["Launch", "detect", "METHODS"]

log = logging.getLogger("gshmem")

METHODS = (
    "explicit",
    "gshmem.run",
    "torch.distributed",
    "jax.distributed",
    "mpi",
    "torchrun-env",
    "srun-env",
    "single",
)

_MPI_LAUNCH_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK")
_TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True)
class Launch:
    """Where this process stands in the job.

    ``local_rank``/``local_size`` count the processes of the job on this host; they are -1 for
    ``explicit`` when the environment gives no hint (the comm finds them itself at init).
    ``uid`` carries the job's secret, so it is left out of ``repr``.
    """

    uid: bytes = field(repr=False)
    rank: int
    nranks: int
    local_rank: int
    local_size: int
    method: str

    @property
    def rendezvous(self) -> str:
        """``"address:port"`` of rank 0's bootstrap (safe to log)."""
        return _C.unique_id_describe(self.uid)


# -- per-process state ----------------------------------------------------------------------------

_lock = threading.Lock()
_calls = 0  # detect() calls so far in this process; the same sequence on every rank
_run_env_used = False  # the gshmem.run id was handed out once already


def _next_call() -> int:
    global _calls
    with _lock:
        n = _calls
        _calls += 1
        return n


def _key_prefix(call: int, key: str | None, *extra: str) -> str:
    parts = ["gshmem", "launch", *extra, str(call)]
    if key:
        parts.append(key)
    return "/".join(parts)


# -- logging --------------------------------------------------------------------------------------


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _enable_debug_log() -> None:
    """With GSHMEM_DEBUG=1, make the "gshmem" logger's DEBUG lines reach stderr (once)."""
    if not _env_flag("GSHMEM_DEBUG"):
        return
    if any(getattr(h, "_gshmem_debug", False) for h in log.handlers):
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    handler._gshmem_debug = True  # type: ignore[attr-defined]
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)


# -- helpers shared by the adapters ---------------------------------------------------------------


def _timeout() -> float:
    return float(_C.timeout_seconds())


def _rank0_uid(single_host: bool) -> bytes:
    """Creates the job's id on rank 0, listening now (the rank-0 comm adopts the socket)."""
    if os.environ.get("GSHMEM_BOOTSTRAP_ADDR"):
        address = None
    else:
        address = "127.0.0.1" if single_host else None
    return _C.unique_id_create(address, 0, listen=True)


def _host_id() -> str:
    """This host's identity: hostname plus kernel boot id (two containers sharing a hostname on
    different machines still differ)."""
    boot = ""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        pass
    return f"{socket.gethostname()}|{boot}"


def _local_from_hosts(hosts: Sequence[str], rank: int) -> tuple[int, int]:
    mine = hosts[rank]
    local_rank = sum(1 for h in hosts[:rank] if h == mine)
    return local_rank, sum(1 for h in hosts if h == mine)


def _int_env(name: str) -> int | None:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise UsageError(f"{name}={value!r} is not an integer; fix or unset it") from None


def _check_rank(rank: int, nranks: int, what: str) -> None:
    if nranks < 1:
        raise UsageError(f"{what}: nranks must be at least 1, got {nranks}")
    if not 0 <= rank < nranks:
        raise UsageError(f"{what}: rank {rank} is outside [0, {nranks})")


def _check_uid(uid: bytes, what: str) -> bytes:
    if not isinstance(uid, (bytes, bytearray)) or len(uid) != _C.UNIQUE_ID_BYTES:
        size = len(uid) if isinstance(uid, (bytes, bytearray)) else type(uid).__name__
        raise UsageError(
            f"{what}: a unique id is {_C.UNIQUE_ID_BYTES} bytes, got {size}; pass the bytes "
            "rank 0 created, unchanged"
        )
    uid = bytes(uid)
    _C.unique_id_describe(uid)  # raises UsageError when it is not a gshmem id
    return uid


# -- key-value stores -----------------------------------------------------------------------------


class _KV:
    """A job-wide key-value store with string values: set never blocks, get waits for the key."""

    method = ""

    def set(self, key: str, value: str) -> None:
        raise NotImplementedError

    def get_many(self, keys: Sequence[str], timeout: float) -> list[str]:
        raise NotImplementedError

    def get(self, key: str, timeout: float) -> str:
        return self.get_many([key], timeout)[0]

    def timed_out(self, keys: Sequence[str], timeout: float, cause: BaseException) -> TimeoutError:
        shown = ", ".join(repr(k) for k in keys[:4]) + (" ..." if len(keys) > 4 else "")
        return TimeoutError(
            f"{self.method}: key {shown} did not appear in the job's store within {timeout:g} s "
            f"(GSHMEM_TIMEOUT): is every rank calling gshmem.init()/launch.detect() the same "
            f"number of times with the same key, and is rank 0 alive? ({cause})"
        )


class _TorchKV(_KV):
    def __init__(self, store: Any, method: str) -> None:
        self.store = store
        self.method = method

    def set(self, key: str, value: str) -> None:
        self.store.set(key, value.encode())

    def get_many(self, keys: Sequence[str], timeout: float) -> list[str]:
        try:
            self.store.wait(list(keys), datetime.timedelta(seconds=timeout))
        except Exception as e:  # DistStoreError on timeout, DistNetworkError if the store died
            if "timeout" in str(e).lower() or "timed out" in str(e).lower():
                raise self.timed_out(keys, timeout, e) from e
            raise BootstrapError(f"{self.method}: the job's store failed: {e}") from e
        if hasattr(self.store, "multi_get"):
            values = self.store.multi_get(list(keys))
        else:
            values = [self.store.get(k) for k in keys]
        return [bytes(v).decode() for v in values]


class _JaxKV(_KV):
    method = "jax.distributed"

    def __init__(self, client: Any) -> None:
        self.client = client

    def set(self, key: str, value: str) -> None:
        self.client.key_value_set(key, value)

    def get_many(self, keys: Sequence[str], timeout: float) -> list[str]:
        out = []
        for k in keys:
            try:
                out.append(self.client.blocking_key_value_get(k, max(1, int(timeout * 1000))))
            except Exception as e:  # XlaRuntimeError DEADLINE_EXCEEDED on timeout
                text = str(e).lower()
                if "deadline" in text or "timeout" in text or "timed out" in text:
                    raise self.timed_out([k], timeout, e) from e
                raise BootstrapError(f"{self.method}: the key-value store failed: {e}") from e
        return out


def _hosts_via_kv(kv: _KV, prefix: str, rank: int, nranks: int) -> list[str]:
    """Collective: every rank publishes its host id and reads everyone's."""
    kv.set(f"{prefix}/host/{rank}", _host_id())
    return kv.get_many([f"{prefix}/host/{r}" for r in range(nranks)], _timeout())


def _uid_via_kv(kv: _KV, prefix: str, rank: int, single_host: bool) -> bytes:
    """Collective: rank 0 creates the id and publishes it; the others wait for it."""
    if rank == 0:
        uid = _rank0_uid(single_host)
        kv.set(f"{prefix}/uid", uid.hex())
        return uid
    text = kv.get(f"{prefix}/uid", _timeout())
    try:
        return bytes.fromhex(text)
    except ValueError:
        raise BootstrapError(f"{kv.method}: key {prefix}/uid holds {text!r}, not an id") from None


def _kv_launch(
    kv: _KV, prefix: str, rank: int, nranks: int, local: tuple[int, int] | None
) -> Launch:
    """The common path of the store-based methods. ``local`` comes from the environment when
    it is known; otherwise host ids are exchanged first."""
    if local is None:
        local = _local_from_hosts(_hosts_via_kv(kv, prefix, rank, nranks), rank)
    uid = _uid_via_kv(kv, prefix, rank, single_host=local[1] == nranks)
    return Launch(uid, rank, nranks, local[0], local[1], kv.method)


def _env_local(rank: int, nranks: int) -> tuple[int, int] | None:
    """torchrun's LOCAL_RANK/LOCAL_WORLD_SIZE, when they describe this very job."""
    lr, ls = _int_env("LOCAL_RANK"), _int_env("LOCAL_WORLD_SIZE")
    if lr is None or ls is None or _int_env("RANK") != rank or _int_env("WORLD_SIZE") != nranks:
        return None
    if not (0 <= lr < ls <= nranks):
        raise UsageError(f"LOCAL_RANK={lr} / LOCAL_WORLD_SIZE={ls} are inconsistent; fix or unset")
    return lr, ls


# -- adapters: each returns None when its method does not apply -----------------------------------


def _from_run_env() -> Launch | None:
    """gshmem.run's environment. The first call returns the launcher's id; later calls (a second
    comm) get a fresh id from rank 0, sent over a short bootstrap on the launcher's id."""
    global _run_env_used
    text = os.environ.get("GSHMEM_UNIQUE_ID")
    if text is None:
        return None
    what = "GSHMEM_UNIQUE_ID (set by gshmem.run)"
    try:
        uid = bytes.fromhex(text.strip())
    except ValueError:
        raise UsageError(
            f"{what} is not hexadecimal ({text[:20]!r}...); start the job with "
            "`python -m gshmem.run`, or unset GSHMEM_UNIQUE_ID"
        ) from None
    uid = _check_uid(uid, what)
    rank, nranks = _int_env("GSHMEM_RANK"), _int_env("GSHMEM_WORLD_SIZE")
    if rank is None or nranks is None:
        raise UsageError(
            "GSHMEM_UNIQUE_ID is set but GSHMEM_RANK/GSHMEM_WORLD_SIZE are not; start the job "
            "with `python -m gshmem.run`, or unset GSHMEM_UNIQUE_ID"
        )
    _check_rank(rank, nranks, "gshmem.run environment")
    local_rank = _int_env("GSHMEM_LOCAL_RANK")
    local_size = _int_env("GSHMEM_LOCAL_WORLD_SIZE")
    local_rank = rank if local_rank is None else local_rank
    local_size = nranks if local_size is None else local_size
    with _lock:
        first, _run_env_used = not _run_env_used, True
    if not first:
        uid = _derive_uid(uid, rank, nranks, single_host=local_size == nranks)
    return Launch(uid, rank, nranks, local_rank, local_size, "gshmem.run")


def _derive_uid(parent: bytes, rank: int, nranks: int, single_host: bool) -> bytes:
    """Collective: rank 0 creates a new id and broadcasts it over a bootstrap on ``parent``."""
    bs = _C.BootstrapHandle(parent, rank, nranks, _timeout())
    try:
        mine = _rank0_uid(single_host) if rank == 0 else bytes(_C.UNIQUE_ID_BYTES)
        return bytes(bs.broadcast(mine, 0))
    finally:
        bs.close()


def _from_torch_distributed(call: int, key: str | None) -> Launch | None:
    if "torch" not in sys.modules:  # an initialized process group implies torch was imported
        return None
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return None
    from torch.distributed.distributed_c10d import _get_default_store

    rank, nranks = dist.get_rank(), dist.get_world_size()
    kv = _TorchKV(_get_default_store(), "torch.distributed")
    return _kv_launch(kv, _key_prefix(call, key), rank, nranks, _env_local(rank, nranks))


def _from_jax_distributed(call: int, key: str | None) -> Launch | None:
    if "jax" not in sys.modules:
        return None
    try:
        from jax._src.distributed import global_state
    except ImportError:
        return None
    client = getattr(global_state, "client", None)
    if client is None:
        return None
    rank, nranks = int(global_state.process_id), int(global_state.num_processes)
    return _kv_launch(_JaxKV(client), _key_prefix(call, key), rank, nranks, None)


def _mpi_launched() -> bool:
    if importlib.util.find_spec("mpi4py") is None:
        return False
    if any(v in os.environ for v in _MPI_LAUNCH_VARS):
        return True
    mpi = sys.modules.get("mpi4py.MPI")  # importing it would initialize MPI: only look
    return bool(mpi is not None and mpi.Is_initialized())


def _from_mpi() -> Launch | None:
    if not _mpi_launched():
        return None
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    rank, nranks = world.Get_rank(), world.Get_size()
    local_rank = _int_env("OMPI_COMM_WORLD_LOCAL_RANK")
    local_size = _int_env("OMPI_COMM_WORLD_LOCAL_SIZE")
    if local_rank is None or local_size is None:
        node = world.Split_type(MPI.COMM_TYPE_SHARED, key=rank)
        try:
            local_rank, local_size = node.Get_rank(), node.Get_size()
        finally:
            node.Free()
    uid = _rank0_uid(single_host=local_size == nranks) if rank == 0 else None
    uid = world.bcast(uid, root=0)
    return Launch(bytes(uid), rank, nranks, local_rank, local_size, "mpi")


def _from_torchrun_env(call: int, key: str | None) -> Launch | None:
    """torchrun (or any launcher writing RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT) without an
    initialized process group."""
    if not all(os.environ.get(v) for v in _TORCHRUN_VARS):
        return None
    rank, nranks = _int_env("RANK"), _int_env("WORLD_SIZE")
    port = _int_env("MASTER_PORT")
    assert rank is not None and nranks is not None and port is not None
    _check_rank(rank, nranks, "torchrun environment (RANK/WORLD_SIZE)")
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    return _store_launch(
        "torchrun-env", _key_prefix(call, key, f"restart{restart}"), rank, nranks,
        os.environ["MASTER_ADDR"], port, agent, _env_local(rank, nranks),
    )  # fmt: skip


def _from_srun_env(call: int, key: str | None) -> Launch | None:
    """A Slurm job step of several tasks started by srun, without MPI or torchrun's variables:
    SLURM_PROCID and SLURM_STEP_NUM_TASKS (srun sets them for its step's tasks only, not for a
    batch script), MASTER_ADDR and MASTER_PORT exported by the job."""
    rank, nranks = _int_env("SLURM_PROCID"), _int_env("SLURM_STEP_NUM_TASKS")
    if rank is None or nranks is None or nranks == 1:
        return None
    _check_rank(rank, nranks, "srun environment (SLURM_PROCID/SLURM_STEP_NUM_TASKS)")
    addr, port = os.environ.get("MASTER_ADDR"), _int_env("MASTER_PORT")
    if not addr or port is None:
        raise UsageError(
            f"srun started {nranks} tasks, but MASTER_ADDR and MASTER_PORT are not set, and "
            "gshmem finds rank 0 through them: export MASTER_ADDR=$(scontrol show hostnames "
            "$SLURM_JOB_NODELIST | head -n 1) and MASTER_PORT=<a free port> before srun, or "
            "launch with MPI (srun --mpi=pmix and mpi4py) or torchrun"
        )
    slurm_restart = os.environ.get("SLURM_RESTART_COUNT", "0")
    return _store_launch(
        "srun-env", _key_prefix(call, key, f"slurm{slurm_restart}"), rank, nranks, addr, port,
        False, None,
    )  # fmt: skip


def _store_launch(method: str, prefix: str, rank: int, nranks: int, addr: str, port: int,
                  agent: bool, local: tuple[int, int] | None) -> Launch:  # fmt: skip
    """The id through a ``torch.distributed.TCPStore``: the launcher's agent store at
    ``addr:port`` (``agent``), else one that rank 0 hosts at ``addr:port+1`` for this call."""
    try:
        from torch.distributed import TCPStore
    except ImportError:
        raise UsageError(
            f"the environment looks like a {method} launch (rank {rank} of {nranks}, "
            f"rendezvous {addr}:{port}) but torch.distributed cannot be imported; install "
            "torch, or pass uid/rank/nranks"
        ) from None
    timeout = datetime.timedelta(seconds=_timeout())
    hosted = not agent and rank == 0
    store_port = port if agent else port + 1
    if store_port > 65535:
        raise UsageError(f"MASTER_PORT={port}: gshmem needs MASTER_PORT+1 free; use a lower port")
    try:
        store = TCPStore(
            addr, store_port, nranks if hosted else None, hosted, timeout, wait_for_workers=False
        )
    except Exception as e:
        who = "host" if hosted else "reach"
        raise BootstrapError(
            f"{method}: cannot {who} the rendezvous store at {addr}:{store_port} ({e}); "
            "free that port, or call torch.distributed.init_process_group() before gshmem "
            "(its store is then used), or pass uid/rank/nranks explicitly"
        ) from e
    kv = _TorchKV(store, method)
    launch = _kv_launch(kv, prefix, rank, nranks, local)
    if not agent:
        # Rank 0's store dies with this call: keep it up until every rank has read the id.
        if rank == 0:
            kv.get_many([f"{prefix}/ack/{r}" for r in range(1, nranks)], _timeout())
        else:
            kv.set(f"{prefix}/ack/{rank}", "1")
    return launch


def _local_hint(rank: int, nranks: int) -> tuple[int, int]:
    """Best local rank/size for ``explicit`` from common launcher variables, else (-1, -1)."""
    for lr_name, ls_name in (
        ("GSHMEM_LOCAL_RANK", "GSHMEM_LOCAL_WORLD_SIZE"),
        ("LOCAL_RANK", "LOCAL_WORLD_SIZE"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
        ("MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
    ):
        lr, ls = _int_env(lr_name), _int_env(ls_name)
        if lr is not None and ls is not None and 0 <= lr < ls <= nranks:
            return lr, ls
    if nranks == 1:
        return 0, 1
    return -1, -1


# -- entry point ----------------------------------------------------------------------------------


def detect(
    uid: bytes | None = None,
    rank: int | None = None,
    nranks: int | None = None,
    *,
    key: str | None = None,
) -> Launch:
    """Returns this process's :class:`Launch`: the job's unique id, rank, size and locality.

    Collective for every method except ``explicit`` and ``single`` (see the module docstring):
    all ranks call it equally often, with the same ``key``; rank 0 creates the id and the call
    blocks until this rank has it (bounded by ``GSHMEM_TIMEOUT``, MPI excepted). ``key``
    separates independent calls, e.g. two groups created in one job.

    Passing ``rank`` and ``nranks`` without ``uid`` detects the method as usual and checks that
    it agrees. Raises :class:`gshmem.UsageError` for inconsistent input,
    :class:`gshmem.TimeoutError` when a peer's value never arrives, and
    :class:`gshmem.BootstrapError` when a store fails.
    """
    _enable_debug_log()
    call = _next_call()
    if (rank is None) != (nranks is None):
        given = "rank" if rank is not None else "nranks"
        raise UsageError(f"detect(): {given} was given without the other; pass both or neither")
    if uid is not None:
        if rank is None or nranks is None:
            raise UsageError(
                "detect(): uid was given without rank and nranks; pass all three, or none "
                "to let gshmem find them from the launcher"
            )
        uid = _check_uid(uid, "detect(uid=...)")
        _check_rank(rank, nranks, "detect()")
        launch = Launch(uid, rank, nranks, *_local_hint(rank, nranks), "explicit")
        _log(launch, call)
        return launch
    if rank is not None and nranks is not None:
        _check_rank(rank, nranks, "detect()")
    adapters: list[Callable[[], Launch | None]] = [
        _from_run_env,
        lambda: _from_torch_distributed(call, key),
        lambda: _from_jax_distributed(call, key),
        _from_mpi,
        lambda: _from_torchrun_env(call, key),
        lambda: _from_srun_env(call, key),
    ]
    for adapter in adapters:
        launch = adapter()
        if launch is not None:
            break
    else:
        if nranks is not None and nranks > 1:
            raise UsageError(
                f"detect(): rank={rank}, nranks={nranks} were given without uid and no launcher "
                "was found (gshmem.run, torch.distributed, jax.distributed, MPI, torchrun, "
                "srun); pass uid too (created on rank 0 and sent to the others), or start with "
                "`python -m gshmem.run -n N`"
            )
        launch = Launch(_rank0_uid(single_host=True), 0, 1, 0, 1, "single")
    if rank is not None and (rank, nranks) != (launch.rank, launch.nranks):
        raise UsageError(
            f"detect(): rank={rank}, nranks={nranks} were given but {launch.method} says "
            f"rank={launch.rank}, nranks={launch.nranks}; pass matching values or none"
        )
    _log(launch, call)
    return launch


def _log(launch: Launch, call: int) -> None:
    log.debug(
        "launch[%d]: method=%s rank=%d/%d local=%d/%d rendezvous=%s",
        call,
        launch.method,
        launch.rank,
        launch.nranks,
        launch.local_rank,
        launch.local_size,
        launch.rendezvous,
    )
