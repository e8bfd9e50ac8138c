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

from gshmem import _C, _registry
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

    def view(self, offset: int, nbytes: int) -> Buffer:
        """Bytes ``[offset, offset + nbytes)`` of this buffer, as a Buffer (not an allocation:
        never ``free`` it). Operations take Buffers with less host work than tensors, so hot
        loops keep their signals and destinations as views made once."""
        offset, nbytes = _as_count(offset, "offset"), _as_count(nbytes, "nbytes")
        if offset < 0 or nbytes < 0 or offset + nbytes > self.nbytes:
            raise UsageError(
                f"view [{offset}, {offset + nbytes}) is outside the buffer's {self.nbytes} bytes"
            )
        return Buffer(self.comm, self.ptr + offset, nbytes, self.pe)


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
        """Collective: waits for this GPU's work and for every PE, then releases everything."""
        self._live.clear()
        self._handle.finalize()

    def abort(self) -> None:
        """Not collective, like ``ncclCommAbort``: makes every bounded device wait of this comm
        give up and every on-stream wait go on (their results are undefined), then releases the
        heap, file descriptors and sockets without waiting for peers, whose next call fails
        naming this PE."""
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
        """Collective host barrier. Does not wait for GPU work: synchronize streams first."""
        self._handle.barrier()

    def heap_info(self) -> dict[str, int]:
        """Bytes reserved, mapped and in use in this PE's heap, and its base address."""
        info = self._handle.info()
        return {k: info[k] for k in ("heap_reserved", "heap_mapped", "heap_in_use", "heap_base")}

    # -- collectives: backend choice (gshmem/coll_select.py, docs/collectives.md) ------------
    def enable_nccl(self) -> None:
        """Collective: loads NCCL at run time and creates its communicator over this comm, so
        collectives on the world team may choose it where it is faster. Raises the same
        ``UsageError`` on every PE when NCCL cannot be loaded (gshmem's own keep working)."""
        from gshmem import coll_select

        coll_select.enable_nccl(self)

    def explain(
        self, op: str, nbytes: int, npes: int | None = None, symmetric: bool = False
    ) -> str:
        """The backend and algorithm collective ``op`` ("all_reduce", "all_gather", ...) would
        use for ``nbytes`` of input per PE over ``npes`` PEs (default all), and why.
        ``symmetric``: the output is a symmetric tensor (``empty``/``zeros``; for all_to_all,
        not the input), which lets large calls write it directly and stay on gshmem longer.
        Not collective; runs nothing."""
        from gshmem import coll_select

        return coll_select.explain(self, op, nbytes, npes, symmetric)

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
        GSHMEM_STREAM_KERNEL_MAX_BYTES (default 16 KiB), which a one-block kernel copies.
        Complete when the stream passes it: later work on this stream sees ``dst`` written and
        may reuse ``src``. PE ``pe`` sees the data once it observes a later signal or barrier
        from this stream (``put_signal``, ``signal_op``, ``barrier_on_stream``)."""
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

    # -- collectives ------------------------------------------------------------------------
    # Collective over ``team`` (a gshmem.Team of this comm; None: every PE): every member makes
    # the same call (same element count, dtype, op and root) in the same order relative to its
    # other collectives on that team (docs/collectives.md). Each enqueues on ``stream`` (as for
    # the on-stream operations above) and returns at once; results are in ``out`` when the stream
    # gets there. Capturable in CUDA graphs. Tensors: contiguous, on this comm's GPU, float32,
    # bfloat16, float16, int32 or int64, symmetric (``empty``/``zeros``) or ordinary (staged
    # through the comm's scratch). Collectives on teams that share two or more PEs must be
    # ordered on each PE (one stream, or events between streams). The backend and algorithm are
    # chosen per call; GSHMEM_COLL_BACKEND, GSHMEM_COLL_<OP>_BACKEND and GSHMEM_COLL_<OP>_ALGO
    # override the choice.

    def all_reduce(
        self, t: Any, op: str = "sum", out: Any = None, team: Team | None = None, stream: Any = None
    ) -> Any:
        """``out[i] = op`` over the members' ``t[i]`` (``op``: "sum", "prod", "min", "max";
        16-bit floats accumulate in fp32). In place into ``t`` when ``out`` is None. Returns
        ``out``."""
        out = t if out is None else out
        code, count, in_ptr = _coll_tensor(t, "all_reduce: t", self.device)
        _coll_out(out, t, count, "all_reduce")
        _C.all_reduce_on_stream(
            self._handle,
            _team_arg(team),
            in_ptr,
            out.data_ptr(),
            count,
            code,
            _redop(op),
            self._stream(stream),
        )
        return out

    def all_gather(
        self, t: Any, out: Any = None, team: Team | None = None, stream: Any = None
    ) -> Any:
        """``out[m]`` = member ``m``'s ``t``; ``out`` holds team-size times ``t``'s elements
        (new, of shape ``(team size, *t.shape)``, when None). ``t`` may be ``out``'s own block
        (in place). Returns ``out``."""
        code, count, in_ptr = _coll_tensor(t, "all_gather: t", self.device)
        n = self._team_size(team)
        out = t.new_empty((n, *t.shape)) if out is None else out
        _coll_out(out, t, count * n, "all_gather")
        _C.all_gather_on_stream(
            self._handle,
            _team_arg(team),
            in_ptr,
            out.data_ptr(),
            count,
            code,
            self._stream(stream),
        )
        return out

    def reduce_scatter(
        self,
        t: Any,
        out: Any = None,
        op: str = "sum",
        team: Team | None = None,
        stream: Any = None,
    ) -> Any:
        """``out[i] = op`` over the members' ``t[me * k + i]``, ``k = t.numel() // team size``
        (which must divide). ``out`` is new when None (``t.shape[0] // size`` rows when that
        divides, else flat). Returns ``out``."""
        code, total, in_ptr = _coll_tensor(t, "reduce_scatter: t", self.device)
        n = self._team_size(team)
        if total % n:
            raise UsageError(
                f"reduce_scatter: t has {total} elements, not a multiple of the team size {n}"
            )
        count = total // n
        if out is None:
            rows = t.dim() >= 1 and t.shape[0] % n == 0
            out = t.new_empty((t.shape[0] // n, *t.shape[1:]) if rows else (count,))
        _coll_out(out, t, count, "reduce_scatter")
        _C.reduce_scatter_on_stream(
            self._handle,
            _team_arg(team),
            in_ptr,
            out.data_ptr(),
            count,
            code,
            _redop(op),
            self._stream(stream),
        )
        return out

    def broadcast(
        self,
        t: Any,
        root: int,
        out: Any = None,
        team: Team | None = None,
        stream: Any = None,
    ) -> Any:
        """``out`` = team member ``root``'s ``t`` (``t`` is read on the root only). In place
        into ``t`` when ``out`` is None. Returns ``out``."""
        out = t if out is None else out
        code, count, in_ptr = _coll_tensor(t, "broadcast: t", self.device)
        _coll_out(out, t, count, "broadcast")
        _C.broadcast_on_stream(
            self._handle,
            _team_arg(team),
            in_ptr,
            out.data_ptr(),
            count,
            code,
            _as_count(root, "root"),
            self._stream(stream),
        )
        return out

    def all_to_all(
        self, t: Any, out: Any = None, team: Team | None = None, stream: Any = None
    ) -> Any:
        """Block ``m`` of ``t`` (``t.numel() // team size`` elements) goes to member ``m``;
        block ``m`` of ``out`` comes from member ``m``. ``out`` is new when None; ``out`` may be
        ``t`` (in place). Returns ``out``."""
        code, total, in_ptr = _coll_tensor(t, "all_to_all: t", self.device)
        n = self._team_size(team)
        if total % n:
            raise UsageError(
                f"all_to_all: t has {total} elements, not a multiple of the team size {n}"
            )
        out = t.new_empty(t.shape) if out is None else out
        _coll_out(out, t, total, "all_to_all")
        _C.all_to_all_on_stream(
            self._handle,
            _team_arg(team),
            in_ptr,
            out.data_ptr(),
            total // n,
            code,
            self._stream(stream),
        )
        return out

    def all_to_allv(
        self,
        t: Any,
        send_counts: Sequence[int],
        out: Any,
        recv_counts: Sequence[int],
        send_displs: Sequence[int] | None = None,
        recv_displs: Sequence[int] | None = None,
        team: Team | None = None,
        stream: Any = None,
    ) -> Any:
        """Member ``m`` receives ``send_counts[m]`` elements of ``t`` from ``send_displs[m]``,
        placed in its ``out`` at ``recv_displs[me]``; ``recv_counts[m]`` must be what member
        ``m`` sends here. Displacements default to the running sums of the counts (packed).
        Each count is at most one staging slot (GSHMEM_COLL_SCRATCH_BYTES / (2 x PEs)).
        ``t`` and ``out`` must not overlap. Returns ``out``."""
        code, total, in_ptr = _coll_tensor(t, "all_to_allv: t", self.device)
        out_code, out_total, out_ptr = _coll_tensor(out, "all_to_allv: out", self.device)
        if out_code != code:
            raise UsageError(f"all_to_allv: out is {out.dtype} but t is {t.dtype}; they must match")
        n = self._team_size(team)
        sc = _counts(send_counts, n, "send_counts")
        rc = _counts(recv_counts, n, "recv_counts")
        sd = _displs(send_displs, sc, "send_displs")
        rd = _displs(recv_displs, rc, "recv_displs")
        for counts, displs, have, what in ((sc, sd, total, "t"), (rc, rd, out_total, "out")):
            end = max((d + c for c, d in zip(counts, displs, strict=True) if c), default=0)
            if end > have:
                raise UsageError(
                    f"all_to_allv: the counts and displacements reach element {end} of {what}, "
                    f"which has {have}"
                )
        _C.all_to_allv_on_stream(
            self._handle,
            _team_arg(team),
            in_ptr,
            sc,
            sd,
            out_ptr,
            rc,
            rd,
            code,
            self._stream(stream),
        )
        return out

    def _team_size(self, team: Team | None) -> int:
        return self.nranks if team is None else _team_checked(team).size

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


# -- argument conversion for the collectives ----------------------------------------------------
def _coll_tensor(t: Any, name: str, device: int) -> tuple[int, int, int]:
    """(gshmem dtype code, element count, address) of a contiguous tensor on cuda:``device``."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(t, torch.Tensor):
        raise UsageError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    code = _C.COLL_DTYPES.get(str(t.dtype).removeprefix("torch."))
    if code is None:
        names = ", ".join(_C.COLL_DTYPES)
        raise UsageError(f"{name} is {t.dtype}; collectives take {names}")
    _span(t, name, device)  # device and contiguity
    return int(code), t.numel(), t.data_ptr()


def _coll_out(out: Any, t: Any, count: int, op: str) -> None:
    """``out`` is a tensor like ``t`` (dtype, device, contiguous) of ``count`` elements."""
    _, have, _ = _coll_tensor(out, f"{op}: out", t.device.index)
    if out.dtype != t.dtype:
        raise UsageError(f"{op}: out is {out.dtype} but t is {t.dtype}; they must match")
    if have != count:
        raise UsageError(f"{op}: out has {have} elements; it must have {count}")


def _redop(op: object) -> int:
    """ "sum", "prod", "min", "max" (any case) -> GSHMEM_SUM/PROD/MIN/MAX."""
    key = op.lower() if isinstance(op, str) else None
    if key not in _C.COLL_REDOPS:
        names = ", ".join(repr(k) for k in _C.COLL_REDOPS)
        raise UsageError(f"op must be one of {names}, got {op!r}")
    return int(_C.COLL_REDOPS[key])


def _team_checked(team: Any) -> Team:
    from gshmem.team import Team

    if not isinstance(team, Team):
        raise UsageError(f"team must be a gshmem.Team or None, got {type(team).__name__}")
    return team


def _team_arg(team: Any) -> tuple[int, int, int, int] | None:
    return None if team is None else _team_checked(team)._tuple()


def _counts(values: Sequence[int], n: int, name: str) -> list[int]:
    counts = [_as_count(v, f"all_to_allv: {name}[{i}]") for i, v in enumerate(values)]
    if len(counts) != n:
        raise UsageError(f"all_to_allv: {name} has {len(counts)} entries; the team has {n} PEs")
    if any(c < 0 for c in counts):
        raise UsageError(f"all_to_allv: {name} must not be negative, got {counts}")
    return counts


def _displs(values: Sequence[int] | None, counts: list[int], name: str) -> list[int]:
    if values is None:
        return [sum(counts[:i]) for i in range(len(counts))]
    return _counts(values, len(counts), name)


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
