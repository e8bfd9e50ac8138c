"""gshmem: GPU-initiated one-sided communication over symmetric GPU memory.

Start here::

    import gshmem
    comm = gshmem.init()                 # finds its peers from the launcher (collective)
    x = comm.empty((1024,), torch.float32)   # symmetric tensor (collective)
    right = comm.peer_tensor(x, (comm.rank + 1) % comm.nranks)
    ...
    comm.finalize()

See README.md and docs/ for the whole API.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from gshmem import _C, _ucx
from gshmem._errors import (
    BootstrapError,
    CudaError,
    Error,
    FaultError,
    HeapError,
    TimeoutError,
    UsageError,
)
from gshmem.buffer import Buffer
from gshmem.comm import Comm, for_each, run_concurrently
from gshmem.device import DeviceHandle
from gshmem.team import Team

_ucx.name_wheel_library()

__version__ = "0.1.0"
log = logging.getLogger("gshmem")


def unique_id(address: str | None = None, port: int = 0) -> bytes:
    """Creates a job's unique id on the process that will be rank 0 (not collective).

    The rank-0 comm created later in this process adopts the rendezvous socket opened here.
    ``address`` is where the other ranks will connect (default: GSHMEM_BOOTSTRAP_ADDR, else this
    host's first non-loopback IPv4 address; use "127.0.0.1" for single-host jobs)."""
    return _C.unique_id_create(address, port, True)


def device_count() -> int:
    """CUDA devices visible to this process (0 without a driver or GPU)."""
    return int(_C.device_count())


def _default_device(local_rank: int) -> int:
    env = os.environ.get("GSHMEM_DEVICE")
    if env:
        try:
            return int(env)
        except ValueError:
            raise UsageError(f"GSHMEM_DEVICE='{env}' is not a device ordinal") from None
    count = device_count()
    return local_rank % count if count else 0


def init(
    uid: bytes | None = None,
    rank: int | None = None,
    nranks: int | None = None,
    device: int | None = None,
) -> Comm:
    """Collective: joins the job's group and returns this process's Comm.

    With no arguments the peers are found from what the launcher set up (``python -m gshmem.run``,
    torchrun, an initialized torch.distributed or jax.distributed, MPI via mpi4py, or a single
    process); ``GSHMEM_DEBUG=1`` logs which. ``device`` defaults to GSHMEM_DEVICE, else the local
    rank (else the rank) modulo the visible GPUs; if torch is imported, it becomes torch's
    current device.
    """
    from gshmem import launch

    info = launch.detect(uid, rank, nranks)
    # An explicit setup may not know the local rank (-1): the world rank is the best guess.
    local = info.local_rank if info.local_rank >= 0 else info.rank
    dev = _default_device(local) if device is None else device
    log.debug("init: rank %d of %d via %s on device %d", info.rank, info.nranks, info.method, dev)
    comm = Comm(info.uid, info.rank, info.nranks, dev)
    if "torch" in sys.modules:
        sys.modules["torch"].cuda.set_device(comm.device)
    return comm


def init_local(devices: Sequence[int] | None = None) -> list[Comm]:
    """One process, one Comm per GPU (the usual JAX layout): a group of ``len(devices)`` PEs
    (default: every visible GPU), created concurrently from threads. Collective calls on these
    comms must also be made concurrently: see ``gshmem.for_each``."""
    devs = list(range(device_count())) if devices is None else list(devices)
    if not devs:
        raise CudaError("init_local: no CUDA device is visible to this process")
    uid = unique_id("127.0.0.1")
    return run_concurrently(
        [lambda r=r, d=d: Comm(uid, r, len(devs), d) for r, d in enumerate(devs)]
    )


def include_dir() -> str:
    """Directory holding the public headers (gshmem/gshmem.h, gshmem/device.cuh): the source
    tree's in an editable install (so header edits need no reinstall), else the installed copy."""
    source = Path(__file__).resolve().parents[2] / "include"
    if (source / "gshmem" / "device.cuh").is_file():
        return str(source)
    return str(Path(_C.__file__).resolve().parent / "include")


def library_dir() -> str:
    """Directory holding libgshmem.so (for C/C++ programs that link the host API)."""
    return str(Path(_C.__file__).resolve().parent / "lib")


__all__ = [
    "Buffer",
    "BootstrapError",
    "Comm",
    "DeviceHandle",
    "Team",
    "CudaError",
    "Error",
    "FaultError",
    "HeapError",
    "TimeoutError",
    "UsageError",
    "device_count",
    "for_each",
    "include_dir",
    "init",
    "init_local",
    "library_dir",
    "run_concurrently",
    "unique_id",
]
