"""gshmem under JAX: one comm per local XLA device, in either JAX layout, attached to the FFI
handlers with the symmetric staging the permute needs.

- One process driving every local GPU (``jax.process_count() == 1``): ``gshmem.init_local`` makes
  one comm per device; PE i is ``jax.local_devices()[i]``.
- One process per GPU under ``jax.distributed``: ``gshmem.init`` finds its peers through JAX's
  key-value store; each process drives its one local device.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gshmem._errors import UsageError
from gshmem.jax import _library

if TYPE_CHECKING:
    from gshmem import Buffer, Comm

DEFAULT_SLOT_BYTES = 64 << 20
FLAG_BYTES = 8  # per half of a channel's slot: a ready flag per PE, then arrived (registry.h)


@dataclass
class State:
    comms: list[Comm]  # this process's, one per local device
    ordinals: list[int]  # their XLA device ordinals
    pe_of: dict[int, int]  # jax device id -> gshmem PE, every device of the job
    npes: int
    slot_bytes: int
    memory: list[tuple[Buffer, Buffer]] = field(default_factory=list)  # (slots, flags) per comm


_state: State | None = None


def _slot_bytes() -> int:
    from gshmem import _C

    text = os.environ.get("GSHMEM_JAX_SLOT_BYTES", str(DEFAULT_SLOT_BYTES))
    return int(_C.parse_size(text))


def _comms(devices: list[Any]) -> tuple[list[Comm], dict[int, int]]:
    import jax
    import numpy as np

    import gshmem

    if jax.process_count() == 1:
        comms = gshmem.init_local([d.local_hardware_id for d in devices])
        return comms, {d.id: i for i, d in enumerate(devices)}
    if len(devices) != 1:
        raise UsageError(
            f"gshmem.jax: with {jax.process_count()} processes each must drive one GPU (this one "
            f"has {len(devices)}); start one process per GPU, or one process for all of them"
        )
    from jax.experimental import multihost_utils

    comm = gshmem.init(device=devices[0].local_hardware_id)
    rows = multihost_utils.process_allgather(np.array([devices[0].id, comm.rank], dtype=np.int64))
    return [comm], {int(d): int(pe) for d, pe in np.asarray(rows).reshape(-1, 2)}


def init() -> list[Comm]:
    """Collective over the job: creates this process's comms (once; later calls return them),
    allocates each one's staging (one slot of GSHMEM_JAX_SLOT_BYTES, default 64M, per permute
    channel: _library.channels(), 5) and attaches them to XLA's devices. Call it before tracing
    any gshmem.jax op."""
    global _state
    if _state is not None:
        return _state.comms
    import jax

    import gshmem

    _library.register()
    devices = [d for d in jax.local_devices() if d.platform == "gpu"]
    if not devices:
        raise UsageError("gshmem.jax.init: JAX sees no GPU in this process")
    comms, pe_of = _comms(devices)
    slot_bytes, channels = _slot_bytes(), _library.channels()
    flags = _library.flags(comms[0].nranks) * FLAG_BYTES
    memory = gshmem.for_each(comms, lambda c: (c.malloc(channels * slot_bytes), c.calloc(flags)))
    state = State(comms, [d.local_hardware_id for d in devices], pe_of, comms[0].nranks, slot_bytes,
                  memory)  # fmt: skip
    for comm, ordinal, (slots, flags) in zip(comms, state.ordinals, memory, strict=True):
        _library.attach(ordinal, comm._handle.address, slots.ptr, slot_bytes, flags.ptr)
    _state = state
    return comms


def state() -> State:
    if _state is None:
        raise UsageError("gshmem.jax: call gshmem.jax.init() first (collective, once per process)")
    return _state


def finalize() -> None:
    """Collective: detaches the comms from XLA and finalizes them. Call it once the results of
    every gshmem.jax op are ready (``block_until_ready``); programs compiled before must not run
    afterwards (they fail with an error naming the missing comm)."""
    global _state
    if _state is None:
        return
    import gshmem

    st, _state = _state, None
    for ordinal in st.ordinals:
        _library.detach(ordinal)
    gshmem.for_each(st.comms, lambda c: c.finalize())


__all__ = ["DEFAULT_SLOT_BYTES", "State", "finalize", "init", "state"]
