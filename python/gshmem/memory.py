"""SymmetricMemory: the allocation part of Comm (raw Buffers and torch tensors in the symmetric
heap, peers' views of them).

Contract: ``malloc``/``calloc``/``empty``/``zeros`` and ``free`` are collective (every PE, same
order, same arguments) and return the same offset on every PE, so an object is named by its
local address; ``ptr``/``peer_tensor`` give another PE's copy and are not collective. Memory is
released by ``free`` or ``finalize``, never by garbage collection: a tensor that outlives either
is dangling.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gshmem._errors import UsageError
from gshmem._scalars import as_count
from gshmem.buffer import Buffer

if TYPE_CHECKING:
    import torch

DEFAULT_ALIGNMENT = 256


class SymmetricMemory:
    """Mixin of Comm: needs ``_handle`` (the native comm), ``rank``, ``device`` and ``_live`` (the
    Buffers allocated and not freed, by address)."""

    _handle: Any
    rank: int
    device: int
    _live: dict[int, Buffer]

    # -- raw bytes --
    def malloc(self, nbytes: int, alignment: int = DEFAULT_ALIGNMENT) -> Buffer:
        """Collective: ``nbytes`` of uninitialised symmetric memory (same offset on every PE).
        Does not wait for GPU work; meets the other PEs only for the ``GSHMEM_CHECK_ALLOC``
        comparison and when the heap grows."""
        return self._allocate(nbytes, alignment, zero=False)

    def calloc(self, nbytes: int, alignment: int = DEFAULT_ALIGNMENT) -> Buffer:
        """Collective: like ``malloc``, then zero-filled: waits for this GPU's work and for every
        PE, and returns with every PE's copy zero."""
        return self._allocate(nbytes, alignment, zero=True)

    def _allocate(self, nbytes: int, alignment: int, zero: bool) -> Buffer:
        nbytes = as_count(nbytes, "nbytes")
        if nbytes <= 0:
            raise UsageError(f"nbytes must be positive, got {nbytes}")
        ptr = self._handle.malloc(nbytes, as_count(alignment, "alignment"), zero)
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
        """Collective: a zero-filled torch tensor in the symmetric heap; as ``calloc``, waits for
        this GPU's work and for every PE, and returns with every PE's copy zero."""
        return self._tensor(shape, dtype, zero=True)

    def _tensor(self, shape: int | Sequence[int], dtype: torch.dtype | None, zero: bool):
        import torch

        dtype = torch.float32 if dtype is None else dtype
        dims = (shape,) if isinstance(shape, int) else tuple(shape)
        dims = tuple(as_count(d, "shape") for d in dims)
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


__all__ = ["DEFAULT_ALIGNMENT", "SymmetricMemory"]
