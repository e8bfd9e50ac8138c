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
import sys
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

    # -- on-stream operations ---------------------------------------------------------------
    # Host-initiated one-sided operations enqueued on a CUDA stream (docs/on-stream.md). None of
    # them blocks the host or waits for a peer; each runs when the stream reaches it, in stream
    # order, and every one may be captured into a CUDA graph (correct on every replay).
    # ``stream``: a torch.cuda.Stream, an int cudaStream_t handle (0: the legacy default stream),
    # or None: torch's current stream on this comm's device (the legacy default stream when
    # torch has not been imported). ``pe`` must be load/store-reachable (same host, P2P on).
    # Symmetric arguments are tensors from ``empty``/``zeros`` (or views of them) or Buffers from
    # ``malloc``/``calloc``; local arguments are any contiguous tensor or Buffer on this GPU.

    def put(self, dst: Any, src: Any, pe: int, stream: Any = None) -> None:
        """Copies local ``src`` into PE ``pe``'s copy of symmetric ``dst`` (same byte count).

        By the copy engines (zero SMs), unless the message is at most
        GSHMEM_STREAM_KERNEL_MAX_BYTES (default 0), which a one-block kernel copies. Complete when
        the stream passes it: later work on this stream sees ``dst`` written and may reuse
        ``src``. PE ``pe`` sees the data once it observes a later signal or barrier from this
        stream (``put_signal``, ``signal_op``, ``barrier_on_stream``)."""
        dst_ptr, nbytes = _span(dst, "put: dst", self.device)
        src_ptr, src_bytes = _span(src, "put: src", self.device)
        _same_size("put", nbytes, src_bytes)
        _C.put_on_stream(
            self._handle, dst_ptr, src_ptr, nbytes, _as_count(pe, "pe"), self._stream(stream)
        )

    def get(self, dst: Any, src: Any, pe: int, stream: Any = None) -> None:
        """Copies PE ``pe``'s copy of symmetric ``src`` into local ``dst`` (same byte count).

        By the copy engines (zero SMs) unless at most GSHMEM_STREAM_KERNEL_MAX_BYTES. Complete,
        with ``dst`` readable by later work on this stream, when the stream passes it. It reads
        what PE ``pe`` wrote before a signal or barrier this stream waited for earlier."""
        dst_ptr, nbytes = _span(dst, "get: dst", self.device)
        src_ptr, src_bytes = _span(src, "get: src", self.device)
        _same_size("get", nbytes, src_bytes)
        _C.get_on_stream(
            self._handle, dst_ptr, src_ptr, nbytes, _as_count(pe, "pe"), self._stream(stream)
        )

    def put_signal(
        self,
        dst: Any,
        src: Any,
        sig: Any,
        value: int,
        pe: int,
        op: str = "set",
        stream: Any = None,
    ) -> None:
        """``put(dst, src, pe)``, then PE ``pe``'s copy of signal ``sig`` is set to ``value``
        (``op="set"``) or atomically increased by it (``op="add"``).

        A PE that sees the new signal value (``signal_wait_until``) sees all of the data: the
        update is ordered after the copy. Data by the copy engines; the signal SET by a stream
        memory operation (zero SMs in all); ADD needs a one-thread kernel. ``sig`` is one
        int64/uint64 element of a symmetric tensor (or an 8-byte Buffer); ``dst``/``src`` may
        be empty (signal only)."""
        dst_ptr, nbytes = _span(dst, "put_signal: dst", self.device)
        src_ptr, src_bytes = _span(src, "put_signal: src", self.device)
        _same_size("put_signal", nbytes, src_bytes)
        _C.put_signal_on_stream(
            self._handle,
            dst_ptr,
            src_ptr,
            nbytes,
            _signal_ptr(sig, "put_signal", self.device),
            _u64(value, "put_signal: value"),
            _signal_op(op),
            _as_count(pe, "pe"),
            self._stream(stream),
        )

    def signal_op(self, sig: Any, value: int, pe: int, op: str = "set", stream: Any = None) -> None:
        """Sets (``op="set"``) or atomically adds to (``op="add"``) PE ``pe``'s copy of signal
        ``sig`` once everything earlier on the stream is complete; that earlier work is visible
        to ``pe`` before the new value. SET: a stream memory operation (zero SMs); ADD: a
        one-thread kernel."""
        _C.signal_op_on_stream(
            self._handle,
            _signal_ptr(sig, "signal_op", self.device),
            _u64(value, "signal_op: value"),
            _signal_op(op),
            _as_count(pe, "pe"),
            self._stream(stream),
        )

    def signal_wait_until(self, sig: Any, cmp: str, value: int, stream: Any = None) -> None:
        """Holds later work on the stream until this PE's copy of ``sig`` satisfies
        ``sig <cmp> value`` (``cmp``: "eq", "ne", "gt", "ge", "lt", "le"; unsigned 64-bit).

        The host returns at once. Afterwards the stream sees everything the signalling PE wrote
        before its update. "eq", and "ge"/"gt" with value below 2**63, are stream memory
        operations (zero SMs; "ge"/"gt" compare cyclically, which is exact while the signal
        stays below 2**63); the rest poll in a one-thread kernel."""
        _C.signal_wait_until_on_stream(
            self._handle,
            _signal_ptr(sig, "signal_wait_until", self.device),
            _cmp(cmp),
            _u64(value, "signal_wait_until: value"),
            self._stream(stream),
        )

    def quiet(self, stream: Any = None) -> None:
        """OpenSHMEM quiet on a stream: everything enqueued earlier on it completes before
        anything later runs. Stream order already guarantees that for every on-stream operation,
        so nothing is enqueued (docs/on-stream.md says why)."""
        _C.quiet_on_stream(self._handle, self._stream(stream))

    def barrier_on_stream(self, stream: Any = None) -> None:
        """Collective over all PEs, in the same order on each: later work on the stream waits
        until every PE's stream has reached its barrier, and then sees everything each PE's
        stream did before it. Only the GPU waits (a one-warp kernel); the host returns at once.
        Do not run two stream barriers of one comm concurrently (on unordered streams)."""
        _C.barrier_on_stream(self._handle, self._stream(stream))

    def _stream(self, stream: Any) -> int:
        return _stream_handle(stream, self.device)


def _as_count(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"{name} must be an int, got {type(value).__name__}")
    return value


# -- argument conversion for the on-stream operations --------------------------------------------
_SIGNAL_OPS = {"set": _C.SIGNAL_SET, "add": _C.SIGNAL_ADD}
_U64_LIMIT = 1 << 64


def _signal_op(op: object) -> int:
    """``"set"``/``"add"`` (any case) -> GSHMEM_SIGNAL_SET/ADD."""
    key = op.lower() if isinstance(op, str) else None
    if key not in _SIGNAL_OPS:
        raise UsageError(f"op must be 'set' or 'add', got {op!r}")
    return _SIGNAL_OPS[key]


def _cmp(cmp: object) -> int:
    """``"eq"``, ``"ne"``, ``"gt"``, ``"ge"``, ``"lt"``, ``"le"`` (any case) -> GSHMEM_CMP_*."""
    key = cmp.lower() if isinstance(cmp, str) else None
    if key not in _C.CMPS:
        names = ", ".join(repr(k) for k in _C.CMPS)
        raise UsageError(f"cmp must be one of {names}, got {cmp!r}")
    return int(_C.CMPS[key])


def _u64(value: object, name: str) -> int:
    value = _as_count(value, name)
    if not 0 <= value < _U64_LIMIT:
        raise UsageError(
            f"{name} must be an unsigned 64-bit value (0 <= value < 2**64), got {value}"
        )
    return value


def _stream_handle(stream: Any, device: int) -> int:
    """The cudaStream_t (as an int) for ``stream``: None (torch's current stream on ``device``
    when torch is imported, else 0, the legacy default stream), an int handle, or an object with
    a ``cuda_stream`` handle (torch.cuda.Stream) on ``device``."""
    if stream is None:
        torch = sys.modules.get("torch")
        return int(torch.cuda.current_stream(device).cuda_stream) if torch is not None else 0
    if isinstance(stream, int) and not isinstance(stream, bool):
        if stream < 0:
            raise UsageError(f"stream handle must not be negative, got {stream}")
        return stream
    handle = getattr(stream, "cuda_stream", None)
    if isinstance(handle, int) and not isinstance(handle, bool):
        index = getattr(getattr(stream, "device", None), "index", device)
        if index is not None and index != device:
            raise UsageError(
                f"stream belongs to cuda:{index} but this comm's GPU is cuda:{device}; "
                f"use a stream created on cuda:{device}"
            )
        return handle
    raise UsageError(
        "stream must be a torch.cuda.Stream, an int cudaStream_t handle or None (torch's "
        f"current stream), got {type(stream).__name__}"
    )


def _span(obj: Any, name: str, device: int) -> tuple[int, int]:
    """(address, bytes) of a contiguous tensor or a Buffer on cuda:``device``."""
    if isinstance(obj, Buffer):
        if obj.device != device:
            raise UsageError(f"{name} is a Buffer on cuda:{obj.device}, not on cuda:{device}")
        return obj.ptr, obj.nbytes
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(obj, torch.Tensor):
        raise UsageError(
            f"{name} must be a torch.Tensor or a gshmem.Buffer, got {type(obj).__name__}"
        )
    if obj.device.type != "cuda" or obj.device.index != device:
        raise UsageError(f"{name} is on {obj.device}; it must be on cuda:{device}, this comm's GPU")
    if not obj.is_contiguous():
        raise UsageError(f"{name} is not contiguous; pass a contiguous tensor (.contiguous())")
    return obj.data_ptr(), obj.numel() * obj.element_size()


def _signal_ptr(sig: Any, op: str, device: int) -> int:
    """Address of a signal: one int64/uint64 element of a tensor, or an 8-byte Buffer."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(sig, torch.Tensor):
        if sig.dtype not in (torch.int64, torch.uint64) or sig.numel() != 1:
            raise UsageError(
                f"{op}: sig must be one int64/uint64 element (e.g. sigs[i:i+1] of a symmetric "
                f"int64 tensor), got {sig.numel()} element(s) of {sig.dtype}"
            )
    elif isinstance(sig, Buffer):
        if sig.nbytes != 8:
            raise UsageError(f"{op}: a Buffer used as sig must be 8 bytes, got {sig.nbytes}")
    return _span(sig, f"{op}: sig", device)[0]


def _same_size(op: str, dst_bytes: int, src_bytes: int) -> None:
    if dst_bytes != src_bytes:
        raise UsageError(
            f"{op}: dst has {dst_bytes} bytes but src has {src_bytes}; they must match "
            "(slice the larger one)"
        )


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
