"""The FFI handlers' shared library (libgshmem_jax.so, built against jaxlib's headers): loading
it, registering its handlers with XLA once, and attaching a comm to an XLA device."""

from __future__ import annotations

import ctypes
import functools

from gshmem._errors import UsageError
from gshmem._native import load

# XLA custom-call target -> the handler's symbol in the library
TARGETS = {
    "gshmem_ppermute": "gshmem_jax_ppermute",
    "gshmem_ppermute_direct": "gshmem_jax_ppermute_direct",
    "gshmem_ppermute_start": "gshmem_jax_ppermute_start",
    "gshmem_ppermute_done": "gshmem_jax_ppermute_done",
    "gshmem_all_reduce": "gshmem_jax_all_reduce",
    "gshmem_all_gather": "gshmem_jax_all_gather",
    "gshmem_reduce_scatter": "gshmem_jax_reduce_scatter",
    "gshmem_all_to_all": "gshmem_jax_all_to_all",
}


@functools.cache
def library() -> ctypes.CDLL:
    lib = load(
        "gshmem_jax",
        "gshmem was built without jax; install jax, then reinstall gshmem "
        "(pip install --no-build-isolation -e .)",
    )
    lib.gshmem_jax_attach.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                      ctypes.c_size_t, ctypes.c_void_p]  # fmt: skip
    lib.gshmem_jax_attach.restype = ctypes.c_int
    lib.gshmem_jax_detach.argtypes = [ctypes.c_int]
    lib.gshmem_jax_channels.restype = ctypes.c_int
    lib.gshmem_jax_flags.restype = ctypes.c_size_t
    lib.gshmem_jax_direct_puts.restype = ctypes.c_uint64
    lib.gshmem_jax_flags.argtypes = [ctypes.c_int]
    lib.gshmem_jax_last_error.restype = ctypes.c_char_p
    return lib


@functools.cache
def register() -> None:
    """Registers every handler with XLA for CUDA (once per process)."""
    import jax

    lib = library()
    for target, symbol in TARGETS.items():
        jax.ffi.register_ffi_target(
            target, jax.ffi.pycapsule(getattr(lib, symbol)), platform="CUDA"
        )


def channels() -> int:
    """Permute channels per device (src/jax/registry.h): channel 0 for ppermute, the others for
    ppermute_start/_done. attach wants that many slots."""
    return int(library().gshmem_jax_channels())


def flags(nranks: int) -> int:
    """The 8-byte flags attach wants for a comm of ``nranks`` PEs (two halves of every channel's
    slot, (PEs + 1) flags each)."""
    return int(library().gshmem_jax_flags(nranks))


def direct_puts() -> int:
    """How many direct ppermutes (gshmem_ppermute_direct) of this process put straight into the
    receiver's output so far; the others were staged (the receiver's buffer was out of reach)."""
    return int(library().gshmem_jax_direct_puts())


def attach(ordinal: int, comm: int, slots: int, slot_bytes: int, flags: int) -> None:
    """Attaches ``comm`` to XLA device ``ordinal`` with ``channels()`` symmetric slots of
    ``slot_bytes`` (at least 64 KiB) one after the other at ``slots`` and ``flags(PEs)`` zeroed
    8-byte symmetric flags; creates the channels' streams on the comm's GPU."""
    lib = library()
    if lib.gshmem_jax_attach(ordinal, comm, slots, slot_bytes, flags) != 0:
        raise UsageError(lib.gshmem_jax_last_error().decode())


def detach(ordinal: int) -> None:
    library().gshmem_jax_detach(ordinal)


__all__ = ["TARGETS", "attach", "channels", "detach", "direct_puts", "flags", "library", "register"]
