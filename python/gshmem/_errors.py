"""Exception classes raised by gshmem (the native extension raises these by name)."""

from __future__ import annotations

import builtins


class Error(Exception):
    """Base class of every error gshmem raises. The message says what was wrong and what to do."""


class UsageError(Error, ValueError):
    """A bad argument or call sequence: the caller must change the call."""


class BootstrapError(Error):
    """Peers could not be reached, refused this process, or left the job."""


class TimeoutError(BootstrapError, builtins.TimeoutError):
    """A wait exceeded GSHMEM_TIMEOUT; the message names the PEs that did not arrive."""


class HeapError(Error):
    """The symmetric heap is exhausted, or PEs allocated differently."""


class CudaError(Error):
    """A CUDA call failed (no GPU, driver too old, out of device memory, ...)."""


class FaultError(Error):
    """A peer died, or a device-side wait gave up (GSHMEM_TIMEOUT, abort): the message names the
    PE and the wait. The comm fails every later call; abort it (docs/reliability.md)."""


__all__ = [
    "Error",
    "UsageError",
    "BootstrapError",
    "TimeoutError",
    "HeapError",
    "CudaError",
    "FaultError",
]
