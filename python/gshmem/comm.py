"""Comm: one PE of a group, and the symmetric memory it allocates.

Contract (same as the C ABI in include/gshmem/gshmem.h):

* *Collective* calls (``Comm(...)``, ``malloc/calloc/empty/zeros``, ``free``, ``barrier``,
  ``finalize``) must be made by every PE of the comm, in the same order, with the same arguments.
  They block the calling thread until every PE has arrived, or raise ``gshmem.TimeoutError`` after
  ``GSHMEM_TIMEOUT`` seconds naming the PEs that did not.
* Allocation returns the same offset on every PE, so an object is named by its local address;
  ``ptr``/``peer_tensor`` give another PE's copy. Memory is released by ``free`` (collective) or
  ``finalize``, never by garbage collection: a tensor that outlives either is dangling.
* One comm must not be used from several threads at once; different comms may (that is how one
  process drives one comm per GPU, see ``gshmem.init_local``).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from gshmem import _C
from gshmem._errors import UsageError

if TYPE_CHECKING:
    import torch

    from gshmem.device import DeviceHandle
    from gshmem.team import Team

T = TypeVar("T")

DEFAULT_ALIGNMENT = 256


class Buffer:
    """A block of symmetric memory: ``ptr`` on this PE's GPU, ``nbytes`` long.

    Exposes ``__dlpack__`` (a flat uint8 view) so that ``torch.from_dlpack``, ``cupy.from_dlpack``
    and ``jax.dlpack.from_dlpack`` can use it without copying. A Buffer returned by ``peer`` views
    another PE's copy through this GPU's mapping of it.
    """

    def __init__(self, comm: Comm, ptr: int, nbytes: int, pe: int) -> None:
        self.comm = comm
        self.ptr = ptr
        self.nbytes = nbytes
        self.pe = pe

    def __repr__(self) -> str:
        return (
            f"Buffer(ptr=0x{self.ptr:x}, nbytes={self.nbytes}, pe={self.pe}, device={self.device})"
        )

    @property
    def device(self) -> int:
        return self.comm.device

    def __dlpack__(
        self,
        *,
        stream: int | None = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any:
        """A DLPack capsule viewing the bytes (never a copy). gshmem leaves no pending work on any
        stream for a fresh allocation, so there is nothing for ``stream`` to wait for."""
        if copy:
            raise BufferError("gshmem.Buffer exports views only (copy=True is not supported)")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"gshmem.Buffer lives on {self.__dlpack_device__()}, not {dl_device}")
        return _C.device_bytes(self.ptr, self.nbytes, self.device, self)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, self.device)  # kDLCUDA

    def peer(self, pe: int) -> Buffer | None:
        """PE ``pe``'s copy of this buffer, or None if ``pe`` is not load/store-reachable."""
        addr = self.comm.ptr(self.ptr, pe)
        return None if addr is None else Buffer(self.comm, addr, self.nbytes, pe)


class Comm:
    """One PE of a group of ``nranks`` PEs sharing a symmetric heap (collective constructor).

    Most programs get one from ``gshmem.init()``; this constructor is for explicit setups
    (``uid`` from ``gshmem.unique_id()`` on rank 0, distributed by the caller).
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
        """Collective: waits for this GPU's work and for every PE, then releases everything."""
        self._live.clear()
        self._handle.finalize()

    def abort(self) -> None:
        """Not collective: releases everything now; peers' next collective fails clearly."""
        self._live.clear()
        self._handle.abort()

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
        """Collective host barrier. Does not wait for GPU work: synchronize streams first."""
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

    # -- raw symmetric memory ---------------------------------------------------------------
    def malloc(self, nbytes: int, alignment: int = DEFAULT_ALIGNMENT) -> Buffer:
        """Collective: ``nbytes`` of uninitialised symmetric memory (same offset on every PE)."""
        return self._allocate(nbytes, alignment, zero=False)

    def calloc(self, nbytes: int, alignment: int = DEFAULT_ALIGNMENT) -> Buffer:
        """Collective: like ``malloc``, zero-filled on every PE before it returns."""
        return self._allocate(nbytes, alignment, zero=True)

    def _allocate(self, nbytes: int, alignment: int, zero: bool) -> Buffer:
        nbytes = _as_count(nbytes, "nbytes")
        if nbytes <= 0:
            raise UsageError(f"nbytes must be positive, got {nbytes}")
        ptr = self._handle.malloc(nbytes, _as_count(alignment, "alignment"), zero)
        buf = Buffer(self, ptr, nbytes, self.rank)
        self._live[ptr] = buf
        return buf

    def free(self, obj: Buffer | torch.Tensor) -> None:
        """Collective: waits for this GPU's work and for every PE, then frees ``obj``'s block.

        ``obj`` is a Buffer from ``malloc``/``calloc`` or a tensor from ``empty``/``zeros``.
        """
        ptr = obj.ptr if isinstance(obj, Buffer) else obj.untyped_storage().data_ptr()
        if ptr not in self._live:
            raise UsageError(
                "free: this object does not start a live allocation of this comm (a view, "
                "a peer view, an object freed already, or memory from another allocator?)"
            )
        self._handle.free(ptr)
        del self._live[ptr]

    def ptr(self, local: int, pe: int) -> int | None:
        """Address of symmetric address ``local`` in PE ``pe``'s heap, as this GPU sees it;
        None when ``pe`` is not load/store-reachable. Not collective."""
        return self._handle.ptr(local, pe)

    # -- torch tensors ----------------------------------------------------------------------
    def empty(self, shape: int | Sequence[int], dtype: torch.dtype | None = None) -> torch.Tensor:
        """Collective: an uninitialised torch tensor in the symmetric heap."""
        return self._tensor(shape, dtype, zero=False)

    def zeros(self, shape: int | Sequence[int], dtype: torch.dtype | None = None) -> torch.Tensor:
        """Collective: a zero-filled torch tensor in the symmetric heap (zero on every PE)."""
        return self._tensor(shape, dtype, zero=True)

    def _tensor(self, shape: int | Sequence[int], dtype: torch.dtype | None, zero: bool):
        import torch

        dtype = torch.float32 if dtype is None else dtype
        dims = (shape,) if isinstance(shape, int) else tuple(shape)
        dims = tuple(_as_count(d, "shape") for d in dims)
        if any(d < 0 for d in dims):
            raise UsageError(f"shape must not be negative, got {dims}")
        itemsize = torch.empty((), dtype=dtype).element_size()
        nbytes = max(math.prod(dims) * itemsize, 1)
        buf = self._allocate(nbytes, max(DEFAULT_ALIGNMENT, itemsize), zero)
        flat = torch.from_dlpack(buf)[: math.prod(dims) * itemsize]
        return flat.view(dtype).view(dims)

    def peer_tensor(self, t: torch.Tensor, pe: int) -> torch.Tensor | None:
        """A view of PE ``pe``'s copy of symmetric tensor ``t`` (same shape, strides, dtype), on
        this PE's device; None when ``pe`` is not load/store-reachable. Not collective.

        Reads and writes through it go over NVLink/PCIe. They are ordered with this PE's own
        stream only: to hand data to the peer, synchronize and then ``barrier()`` (or use the
        signal operations of the device API)."""
        import torch

        storage = t.untyped_storage()
        base = storage.data_ptr()
        addr = self.ptr(base, pe)
        if addr is None:
            return None
        peer = Buffer(self, addr, storage.nbytes(), pe)
        flat = torch.from_dlpack(peer).view(t.dtype)
        return flat.as_strided(t.shape, t.stride(), t.storage_offset())


def _as_count(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"{name} must be an int, got {type(value).__name__}")
    return value


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
