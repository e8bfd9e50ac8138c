"""OnStreamOps: the on-stream part of Comm (docs/on-stream.md): host-initiated one-sided
operations enqueued on a CUDA stream."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gshmem import _C
from gshmem._scalars import as_count, u64
from gshmem._stream_args import (
    address,
    cmp_code,
    copy_rows,
    same_size,
    signal_op_code,
    signal_ptr,
    span,
)


class OnStreamOps:
    """Mixin of Comm: needs ``_handle`` (the native comm), ``device`` and ``_stream`` (a stream
    argument as a cudaStream_t)."""

    _handle: Any
    device: int
    _stream: Callable[[Any], int]

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
        dst_ptr, nbytes = span(dst, "put: dst", self.device)
        src_ptr, src_bytes = span(src, "put: src", self.device)
        same_size("put", nbytes, src_bytes)
        _C.put_on_stream(
            self._handle, dst_ptr, src_ptr, nbytes, as_count(pe, "pe"), self._stream(stream)
        )

    def get(self, dst: Any, src: Any, pe: int, stream: Any = None) -> None:
        """Copies PE ``pe``'s copy of symmetric ``src`` into local ``dst`` (same byte count).

        By the copy engines (zero SMs) unless at most GSHMEM_STREAM_KERNEL_MAX_BYTES. Complete,
        with ``dst`` readable by later work on this stream, when the stream passes it. It reads
        what PE ``pe`` wrote before a signal or barrier this stream waited for earlier."""
        dst_ptr, nbytes = span(dst, "get: dst", self.device)
        src_ptr, src_bytes = span(src, "get: src", self.device)
        same_size("get", nbytes, src_bytes)
        _C.get_on_stream(
            self._handle, dst_ptr, src_ptr, nbytes, as_count(pe, "pe"), self._stream(stream)
        )

    def put_2d(self, dst: Any, src: Any, pe: int, stream: Any = None) -> None:
        """Copies local ``src`` into PE ``pe``'s copy of ``dst``, both tensors of one shape and
        dtype whose elements are rows of contiguous bytes at one pitch, such as
        ``x[:, a:b]`` of a contiguous ``x`` (``dst`` a view of a symmetric tensor).

        One 2-D copy-engine copy whatever the size (zero SMs): a strided piece moves without
        packing it first. Completion and visibility as ``put``."""
        d_ptr = address(dst, "put_2d: dst", self.device)
        s_ptr = address(src, "put_2d: src", self.device)
        d_pitch, s_pitch, width, height = copy_rows(dst, src, "put_2d")
        _C.put_2d_on_stream(self._handle, d_ptr, d_pitch, s_ptr, s_pitch, width, height,
                            as_count(pe, "pe"), self._stream(stream))  # fmt: skip

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
        dst_ptr, nbytes = span(dst, "put_signal: dst", self.device)
        src_ptr, src_bytes = span(src, "put_signal: src", self.device)
        same_size("put_signal", nbytes, src_bytes)
        _C.put_signal_on_stream(
            self._handle,
            dst_ptr,
            src_ptr,
            nbytes,
            signal_ptr(sig, "put_signal", self.device),
            u64(value, "put_signal: value"),
            signal_op_code(op),
            as_count(pe, "pe"),
            self._stream(stream),
        )

    def signal_op(self, sig: Any, value: int, pe: int, op: str = "set", stream: Any = None) -> None:
        """Sets (``op="set"``) or atomically adds to (``op="add"``) PE ``pe``'s copy of signal
        ``sig`` once everything earlier on the stream is complete; that earlier work is visible
        to ``pe`` before the new value. SET: a stream memory operation (zero SMs); ADD: a
        one-thread kernel."""
        _C.signal_op_on_stream(
            self._handle,
            signal_ptr(sig, "signal_op", self.device),
            u64(value, "signal_op: value"),
            signal_op_code(op),
            as_count(pe, "pe"),
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
            signal_ptr(sig, "signal_wait_until", self.device),
            cmp_code(cmp),
            u64(value, "signal_wait_until: value"),
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


__all__ = ["OnStreamOps"]
