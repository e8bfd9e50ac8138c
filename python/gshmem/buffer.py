"""Buffer: a block of symmetric memory as raw bytes (``Comm.malloc``/``calloc``), exportable by
DLPack to torch, CuPy and JAX without a copy."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gshmem import _C
from gshmem._errors import UsageError
from gshmem._scalars import as_count

if TYPE_CHECKING:
    from gshmem.memory import SymmetricMemory


class Buffer:
    """A block of symmetric memory: ``ptr`` on this PE's GPU, ``nbytes`` long.

    Exposes ``__dlpack__`` (a flat uint8 view) so that ``torch.from_dlpack``, ``cupy.from_dlpack``
    and ``jax.dlpack.from_dlpack`` can use it without copying. A Buffer returned by ``peer`` views
    another PE's copy through this GPU's mapping of it.
    """

    def __init__(self, comm: SymmetricMemory, ptr: int, nbytes: int, pe: int) -> None:
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
        """A DLPack capsule viewing the bytes (never a copy). No stream synchronisation
        (``stream`` is not used): gshmem leaves no pending work for a fresh allocation, but bytes
        that on-stream operations or kernels write must be ordered by the consumer after them."""
        if copy:
            raise BufferError("gshmem.Buffer exports views only (copy=True is not supported)")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"gshmem.Buffer lives on {self.__dlpack_device__()}, not {dl_device}")
        return _C.device_bytes(self.ptr, self.nbytes, self.device, self)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, self.device)  # kDLCUDA

    def peer(self, pe: int) -> Buffer | None:
        """PE ``pe``'s copy of this buffer, or None if ``pe`` is not load/store-reachable. Not
        collective; accesses through it are ordered with this PE's streams only (synchronize,
        then ``barrier()``, to hand data over)."""
        addr = self.comm.ptr(self.ptr, pe)
        return None if addr is None else Buffer(self.comm, addr, self.nbytes, pe)

    def view(self, offset: int, nbytes: int) -> Buffer:
        """Bytes ``[offset, offset + nbytes)`` of this buffer, as a Buffer (not an allocation:
        never ``free`` it). Operations take Buffers with less host work than tensors, so hot
        loops keep their signals and destinations as views made once."""
        offset, nbytes = as_count(offset, "offset"), as_count(nbytes, "nbytes")
        if offset < 0 or nbytes < 0 or offset + nbytes > self.nbytes:
            raise UsageError(
                f"view [{offset}, {offset + nbytes}) is outside the buffer's {self.nbytes} bytes"
            )
        return Buffer(self.comm, self.ptr + offset, nbytes, self.pe)


__all__ = ["Buffer"]
