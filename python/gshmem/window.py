"""Windows (docs/windows.md): memory every PE registers, sizes free per PE, with numbered signals
and counters in independent contexts, for kernels written against ``gshmem/device/window.cuh``
(``gshmem::WindowContext``: put with ``SignalAdd`` / ``CounterInc``, flush, wait_signal).

``Window(comm, memory, contexts=, signals=, counters=)`` (usually ``comm.register_window``) is
collective over the comm's world, like ``deregister()``. ``handle()`` gives the by-value
``gshmem_window_t`` for kernels; ``signals`` and ``counters`` view this PE's words from the host
(read them after the kernels that update them have finished).
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any

import numpy as np

from gshmem import _C
from gshmem._errors import UsageError
from gshmem.buffer import Buffer

if TYPE_CHECKING:
    import torch

    from gshmem._comm_like import CommLike

MAX_PER_CONTEXT = 1 << 16  # signals or counters per context (the C library's bound)
MAX_CONTEXTS = 1 << 16


class WindowStruct(ctypes.Structure):
    """The C ``gshmem_window_t`` (include/gshmem/device_state.h)."""

    _fields_ = [
        ("version", ctypes.c_uint32),
        ("my_pe", ctypes.c_int32),
        ("n_pes", ctypes.c_int32),
        ("n_contexts", ctypes.c_int32),
        ("n_signals", ctypes.c_int32),
        ("n_counters", ctypes.c_int32),
        ("bases", ctypes.c_uint64),
        ("sizes", ctypes.c_uint64),
        ("signals", ctypes.c_uint64),
        ("counters", ctypes.c_uint64),
        ("signal_offset", ctypes.c_uint64),
        ("proxy_region", ctypes.c_int32),
        ("counter_first", ctypes.c_uint32),
    ]


if ctypes.sizeof(WindowStruct) != _C.WINDOW_STATE_SIZE:
    raise ImportError("gshmem.window: WindowStruct does not match gshmem_window_t; reinstall")


def check_counts(contexts: int, signals: int, counters: int) -> None:
    """UsageError unless the counts are what registration accepts (checked before any PE blocks
    in the collective)."""
    for name, value, low, high in (
        ("contexts", contexts, 1, MAX_CONTEXTS),
        ("signals", signals, 0, MAX_PER_CONTEXT),
        ("counters", counters, 0, MAX_PER_CONTEXT),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise UsageError(f"register_window: {name} must be an int in [{low}, {high}], "
                             f"got {value!r}")  # fmt: skip


def memory_of(memory: Any, device: int) -> tuple[int, int]:
    """(address, bytes) of a contiguous CUDA tensor on ``device`` or of a gshmem Buffer."""
    if isinstance(memory, Buffer):
        return memory.ptr, memory.nbytes
    is_cuda, dev = getattr(memory, "is_cuda", None), getattr(memory, "device", None)
    if is_cuda is None or not hasattr(memory, "data_ptr"):
        raise UsageError(f"register_window: expected a CUDA tensor or a gshmem Buffer, got "
                         f"{type(memory).__name__}")  # fmt: skip
    if not is_cuda or dev.index != device:
        raise UsageError(f"register_window: the tensor is on {dev}, the comm's GPU is "
                         f"cuda:{device}")  # fmt: skip
    if not memory.is_contiguous():
        raise UsageError("register_window: the tensor must be contiguous")
    nbytes = memory.numel() * memory.element_size()
    if nbytes == 0:
        raise UsageError("register_window: the tensor is empty")
    return memory.data_ptr(), nbytes


class Window:
    """This PE's part of a window (collective to create; the comm owns the registration)."""

    def __init__(
        self, comm: CommLike, memory: Any, *, contexts: int = 1, signals: int = 1, counters: int = 1
    ) -> None:
        check_counts(contexts, signals, counters)
        ptr, nbytes = memory_of(memory, comm.device)
        self.comm, self.memory = comm, memory  # the memory stays alive with the window
        self._win, raw = _C.window_register(comm._handle, ptr, nbytes, contexts, signals,
                                            counters)  # fmt: skip
        self._raw = bytes(raw)
        self.struct = WindowStruct.from_buffer_copy(self._raw)
        self.contexts, self.n_signals, self.n_counters = contexts, signals, counters
        tables = self._words(self.struct.bases, 3 * comm.nranks).tolist()
        n = comm.nranks
        self.sizes: list[int] = tables[n : 2 * n]
        self._signal_ptr = tables[2 * n + comm.rank]

    def _words(self, ptr: int, count: int) -> torch.Tensor:
        import torch

        view = Buffer(self.comm, ptr, 8 * count, self.comm.rank)
        return torch.from_dlpack(view).view(torch.int64)

    def handle(self) -> bytes:
        """The ``gshmem_window_t`` bytes a kernel takes as ``gshmem::Window``."""
        return self._raw

    def numpy(self) -> np.ndarray:
        """The handle as a one-element structured array: CuPy passes it by value."""
        return np.frombuffer(self._raw, dtype=np.dtype(WindowStruct)).copy()

    @property
    def signals(self) -> torch.Tensor:
        """int64 ``[contexts, signals]``: this PE's signals (peers add into them)."""
        n = max(self.n_signals, 1)
        return self._words(self._signal_ptr, self.contexts * n).view(self.contexts, n)

    @property
    def counters(self) -> torch.Tensor:
        """int64 ``[contexts, counters]``: this PE's counters."""
        n = max(self.n_counters, 1)
        return self._words(self.struct.counters, self.contexts * n).view(self.contexts, n)

    @property
    def nbytes(self) -> int:
        return self.sizes[self.comm.rank]

    def deregister(self) -> None:
        """Collective: waits for this GPU's work and for every PE, then releases the window."""
        if self._win is None:
            raise UsageError("deregister: this window is already deregistered")
        _C.window_deregister(self.comm._handle, self._win)
        self._win = None

    def __repr__(self) -> str:
        return (f"Window(pe={self.comm.rank}, sizes={self.sizes}, contexts={self.contexts}, "
                f"signals={self.n_signals}, counters={self.n_counters})")  # fmt: skip


__all__ = [
    "MAX_CONTEXTS",
    "MAX_PER_CONTEXT",
    "Window",
    "WindowStruct",
    "check_counts",
    "memory_of",
]
