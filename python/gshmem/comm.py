"""Comm: one PE of a group. Its surface comes in parts, one concept each: lifetime, teams and
device handles here; symmetric memory (memory.py), on-stream operations (onstream.py) and
collectives (collectives.py) as mixins it is made of. Lower modules never import this one.

Contract (same as the C ABI in include/gshmem/gshmem.h):

* *Collective* calls (``Comm(...)``, ``malloc/calloc/empty/zeros``, ``free``, ``barrier``,
  ``finalize``) must be made by every PE of the comm, in the same order, with the same arguments.
  Those that meet the other PEs block the calling thread until every PE has arrived, or raise
  ``gshmem.TimeoutError`` after ``GSHMEM_TIMEOUT`` seconds naming the PEs that did not
  (``malloc``/``empty`` meet them only for the ``GSHMEM_CHECK_ALLOC`` comparison and when the
  heap grows).
* The collectives and on-stream operations (``all_reduce``, ``put``, ...) are collective or
  one-sided as their docstrings say, and stream-ordered: they return once enqueued.
* Allocation returns the same offset on every PE, so an object is named by its local address;
  ``ptr``/``peer_tensor`` give another PE's copy. Memory is released by ``free`` (collective) or
  ``finalize``, never by garbage collection: a tensor that outlives either is dangling.
* One comm must not be used from several threads at once; different comms may (that is how one
  process drives one comm per GPU, see ``gshmem.init_local``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from gshmem import _C, _registry
from gshmem._stream_args import stream_handle
from gshmem.buffer import Buffer
from gshmem.collectives import Collectives
from gshmem.memory import SymmetricMemory
from gshmem.onstream import OnStreamOps

if TYPE_CHECKING:
    import torch

    from gshmem.device import DeviceHandle
    from gshmem.team import Team
    from gshmem.window import Window

T = TypeVar("T")


class Comm(SymmetricMemory, OnStreamOps, Collectives):
    """One PE of a group of ``nranks`` PEs sharing a symmetric heap (collective constructor).

    Most programs get one from ``gshmem.init()``; this constructor is for explicit setups
    (``uid`` from ``gshmem.unique_id()`` on rank 0, distributed by the caller). As a context
    manager: ``finalize`` (collective) on a normal exit, ``abort`` (not collective) on an
    exception.
    """

    def __init__(self, uid: bytes, rank: int, nranks: int, device: int) -> None:
        self._handle = _C.CommHandle(uid, rank, nranks, device)
        info = self._handle.info()
        self.rank: int = info["rank"]
        self.nranks: int = info["nranks"]
        self.local_rank: int = info["local_rank"]
        self.local_size: int = info["local_size"]
        self.device: int = info["device"]
        self._live: dict[int, Buffer] = {}
        # gshmem.torch's ops name comms by handle; registering now keeps the first op call an
        # attribute read, which torch.compile traces (a lock would break its graph).
        _registry.handle(self)

    def __repr__(self) -> str:
        state = "live" if self.alive else "finalized"
        return (
            f"Comm(rank={self.rank}, nranks={self.nranks}, local_rank={self.local_rank}, "
            f"local_size={self.local_size}, device={self.device}, {state})"
        )

    # -- lifetime ---------------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return bool(self._handle.alive)

    def finalize(self) -> None:
        """Collective: waits for this GPU's work and the proxy path's pending operations, then for
        every PE, then releases everything."""
        self._live.clear()
        self._handle.finalize()

    def abort(self) -> None:
        """Not collective, like ``ncclCommAbort``: makes every bounded device wait of this comm
        give up and every on-stream wait go on (their results are undefined), then releases the
        heap, file descriptors and sockets without waiting for this GPU's queued work (kernels
        that later touch the heap fail: synchronize first where that matters) or for peers, whose
        next call fails naming this PE."""
        self._live.clear()
        self._handle.abort()

    def check(self) -> None:
        """Not collective, not blocking: raises ``gshmem.FaultError`` naming the PE and the wait
        once a peer on this host died (the comm's watchdog) or a bounded device wait gave up
        (``GSHMEM_TIMEOUT``). Every other call of the comm makes this check first; call it after
        synchronising a stream to learn whether the kernels on it completed their waits."""
        self._handle.check()

    def __enter__(self) -> Comm:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if not self.alive:
            return
        if exc_type is None:
            self.finalize()
        else:
            self.abort()

    def barrier(self) -> None:
        """Collective host barrier. Does not wait for GPU work: synchronize streams first. Nor
        does it complete what kernels sent to PEs on the proxy path without waiting (``p``,
        ``put_nbi``, non-fetching atomics): end such kernels with ``quiet(dev)``."""
        self._handle.barrier()

    def heap_info(self) -> dict[str, int]:
        """Bytes reserved, mapped and in use in this PE's heap, and its base address."""
        info = self._handle.info()
        return {k: info[k] for k in ("heap_reserved", "heap_mapped", "heap_in_use", "heap_base")}

    # -- device API handles -----------------------------------------------------------------
    def device_handle(self) -> DeviceHandle:
        """This PE's ``gshmem::Device``: bytes a kernel takes by value (NVRTC, CuPy, extensions).
        Not collective; valid until ``finalize``."""
        from gshmem.device import device_handle

        return device_handle(self)

    def register_window(
        self, memory: Any, *, contexts: int = 1, signals: int = 1, counters: int = 1
    ) -> Window:
        """Collective: this PE's ``memory`` (a contiguous CUDA tensor on this GPU, or a Buffer;
        sizes may differ per PE) as its part of a new window with ``contexts`` independent sets
        of ``signals`` signals and ``counters`` counters (the same counts on every PE). Kernels
        take ``window.handle()`` as a ``gshmem::Window`` (docs/windows.md). Raises UsageError on
        every PE when any PE's memory cannot be shared or a peer is beyond load/store reach."""
        from gshmem.window import Window

        return Window(self, memory, contexts=contexts, signals=signals, counters=counters)

    def peer_bases(self) -> torch.Tensor:
        """int64 tensor on this GPU: PE q's heap base as this GPU sees it (0: unreachable), for
        kernels that compute peer addresses themselves (Triton). Not collective."""
        from gshmem.device import peer_bases

        return peer_bases(self)

    def team_world(self) -> Team:
        """The team of every PE (teams are values; splitting one is local arithmetic)."""
        from gshmem.team import Team

        return Team.world(self)

    def team_node(self) -> Team:
        """The PEs this PE reaches by loads and stores (same host, P2P on)."""
        from gshmem.team import Team

        return Team.node(self)

    def _stream(self, stream: Any) -> int:
        return stream_handle(stream, self.device)


def for_each(comms: Sequence[Comm], fn: Callable[[Comm], T]) -> list[T]:
    """Runs ``fn(comm)`` for every comm at once, one thread each; returns the results in order.

    Collective calls on comms held by one process must be made concurrently (each blocks until
    the others arrive); this is the helper for that. The first exception is re-raised after all
    threads have finished.
    """
    return run_concurrently([lambda c=c: fn(c) for c in comms])


def run_concurrently(calls: Sequence[Callable[[], T]]) -> list[T]:
    """Runs every call in its own thread and returns the results in order; re-raises the first
    exception once all calls have finished (native calls release the GIL while they wait)."""
    results: list[Any] = [None] * len(calls)
    errors: list[BaseException | None] = [None] * len(calls)

    def body(i: int) -> None:
        try:
            results[i] = calls[i]()
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errors[i] = e

    threads = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for e in errors:
        if e is not None:
            raise e
    return results
