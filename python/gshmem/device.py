"""Device-API handles for kernels written outside C++ host code (docs/device-api.md).

* ``device_handle(comm)``: the ``gshmem_device_t`` (``gshmem::Device`` in kernels) of a comm, to
  pass by value to CUDA kernels launched from Python: ``bytes(handle)`` (torch extensions:
  ``memcpy`` into a ``gshmem::Device``), ``handle.numpy()`` (CuPy ``RawKernel`` argument),
  ``handle.struct`` (ctypes, for cuda-bindings ``cuLaunchKernel``).
* ``peer_bases(comm)``: every PE's heap base as this GPU sees it, a torch int64 tensor on the
  comm's device, for Triton kernels: PE ``q``'s copy of symmetric address ``p`` is
  ``peer_bases[q] + (p - peer_bases[comm.rank])`` (0 when ``q`` is not load/store-reachable).
* ``packet_buffer_bytes(nbytes)``: the size of the symmetric buffer that ``put_packets`` of
  ``nbytes`` lands in (``gshmem::packet_buffer_bytes``), for allocating it with ``comm.zeros``.

Both stay valid until the comm is finalized (the heap never moves as it grows). Neither call is
collective.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING

import numpy as np

from gshmem import _C
from gshmem.team import Team, TeamStruct

if TYPE_CHECKING:
    import torch

    from gshmem._comm_like import CommLike


class DeviceStruct(ctypes.Structure):
    """The C ``gshmem_device_t`` (include/gshmem/device_state.h); checked against the C layout
    when this module is imported."""

    _fields_ = [
        ("version", ctypes.c_uint32),
        ("my_pe", ctypes.c_int32),
        ("n_pes", ctypes.c_int32),
        ("my_slot", ctypes.c_int32),
        ("heap_base", ctypes.c_uint64),
        ("slot_base", ctypes.c_uint64),
        ("slot_size", ctypes.c_uint64),
        ("local_index", ctypes.c_uint64),
        ("sync", ctypes.c_uint64),
        ("world", TeamStruct),
        ("node", TeamStruct),
        ("timeout_ns", ctypes.c_uint64),
        ("fault", ctypes.c_uint64),
        ("fault_claim", ctypes.c_uint64),
        ("proxy_slots", ctypes.c_uint64),
        ("proxy_tail", ctypes.c_uint64),
        ("proxy_head", ctypes.c_uint64),
        ("proxy_capacity", ctypes.c_uint64),
        ("proxy_retired", ctypes.c_uint64),
        ("proxy_failed", ctypes.c_uint64),
        ("proxy_results", ctypes.c_uint64),
        ("proxy_inline", ctypes.c_uint64),
    ]


class FaultStruct(ctypes.Structure):
    """The C ``gshmem_fault_t``: what the first bounded device wait that gave up recorded
    (docs/reliability.md); checked against the C layout when this module is imported."""

    _fields_ = [
        ("abort", ctypes.c_uint32),
        ("recorded", ctypes.c_uint32),
        ("op", ctypes.c_int32),
        ("cause", ctypes.c_int32),
        ("pe", ctypes.c_int32),
        ("cmp", ctypes.c_int32),
        ("block", ctypes.c_int32),
        ("thread", ctypes.c_int32),
        ("addr", ctypes.c_uint64),
        ("expected", ctypes.c_uint64),
        ("seen", ctypes.c_uint64),
        ("waited_ns", ctypes.c_uint64),
    ]


def _check_layout() -> None:
    offsets = {name: getattr(DeviceStruct, name).offset for name, _ in DeviceStruct._fields_}
    if offsets != dict(_C.DEVICE_STATE_OFFSETS) or ctypes.sizeof(DeviceStruct) != (
        _C.DEVICE_STATE_SIZE
    ):
        raise ImportError(
            "gshmem.device: DeviceStruct does not match gshmem_device_t in the native library "
            f"(python {offsets}, C {dict(_C.DEVICE_STATE_OFFSETS)}); reinstall gshmem"
        )
    fault = {name: getattr(FaultStruct, name).offset for name, _ in FaultStruct._fields_}
    if fault != dict(_C.FAULT_OFFSETS) or ctypes.sizeof(FaultStruct) != _C.FAULT_SIZE:
        raise ImportError("gshmem.device: FaultStruct does not match gshmem_fault_t; reinstall")
    if ctypes.sizeof(TeamStruct) != _C.TEAM_SIZE:
        raise ImportError("gshmem.device: TeamStruct does not match gshmem_team_t; reinstall")


_check_layout()


class DeviceHandle:
    """A comm's ``gshmem_device_t``: plain bytes that a kernel receives as ``gshmem::Device``."""

    def __init__(self, raw: bytes) -> None:
        if len(raw) != ctypes.sizeof(DeviceStruct):
            raise ValueError(f"a gshmem_device_t is {ctypes.sizeof(DeviceStruct)} bytes")
        self._raw = bytes(raw)
        self.struct = DeviceStruct.from_buffer_copy(self._raw)

    def __bytes__(self) -> bytes:
        return self._raw

    def __len__(self) -> int:
        return len(self._raw)

    def __repr__(self) -> str:
        s = self.struct
        return (
            f"DeviceHandle(my_pe={s.my_pe}, n_pes={s.n_pes}, heap_base=0x{s.heap_base:x}, "
            f"world={self.world}, node={self.node})"
        )

    def numpy(self) -> np.ndarray:
        """A one-element structured array holding the bytes: CuPy passes it by value."""
        return np.frombuffer(self._raw, dtype=np.dtype(DeviceStruct)).copy()

    @property
    def my_pe(self) -> int:
        return int(self.struct.my_pe)

    @property
    def n_pes(self) -> int:
        return int(self.struct.n_pes)

    @property
    def heap_base(self) -> int:
        return int(self.struct.heap_base)

    @property
    def world(self) -> Team:
        t = self.struct.world
        return Team(t.start, t.stride, t.size, t.my_pe)

    @property
    def node(self) -> Team:
        t = self.struct.node
        return Team(t.start, t.stride, t.size, t.my_pe)


def device_handle(comm: CommLike) -> DeviceHandle:
    """The ``gshmem::Device`` of ``comm`` (not collective)."""
    return DeviceHandle(_C.comm_device(comm._handle))


def peer_bases(comm: CommLike) -> torch.Tensor:
    """int64 tensor on ``comm``'s GPU: entry ``q`` is PE ``q``'s heap base as this GPU sees it,
    0 when ``q`` is not load/store-reachable (not collective)."""
    import torch

    base = device_handle(comm).heap_base
    bases = [comm._handle.ptr(base, q) or 0 for q in range(comm.nranks)]
    return torch.tensor(bases, dtype=torch.int64, device=f"cuda:{comm.device}")


def packet_buffer_bytes(nbytes: int) -> int:
    """Bytes of the packet buffer a message of ``nbytes`` needs (device/packet.cuh): 16 per 8
    data bytes, rounded up."""
    if nbytes < 0:
        raise ValueError(f"packet_buffer_bytes: nbytes must be >= 0, got {nbytes}")
    return (nbytes + 7) // 8 * 16


__all__ = [
    "DeviceHandle",
    "DeviceStruct",
    "FaultStruct",
    "device_handle",
    "packet_buffer_bytes",
    "peer_bases",
]
