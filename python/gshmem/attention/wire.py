"""Byte views and comm-weak buffers: what the ring's channels (transport.py) and the
all-gather's mailboxes (exchange.py) both put on the wire."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from gshmem import Buffer, Comm


def as_bytes(src: torch.Tensor) -> torch.Tensor:
    """``src`` (contiguous) as a flat byte tensor: messages are bytes whatever they hold."""
    import torch

    return src.reshape(-1).view(torch.uint8)


def held_by(comm: Comm, buf: Buffer) -> Buffer:
    """``buf`` referring to its comm through ``comm``, the ring's weak proxy: what a channel owns
    (and the tensors viewing it) must not keep the comm alive, or a dropped comm and its rings
    would never be collected."""
    from gshmem import Buffer

    return Buffer(comm, buf.ptr, buf.nbytes, buf.pe)


__all__ = ["as_bytes", "held_by"]
