"""What the ring's channels (transport.py) and the mailboxes (exchange.py) share: byte views,
the sequence-major layout, comm-weak buffers, and the flag protocol of one message. A message to
a PE waits for the receiver's credit (1: its slot is free), resets it, puts its runs and raises
the receiver's arrival flag with the last one; the receiver takes the flag (waits for 1, resets
it) before reading. Every flag ends a round as it began, so CUDA-graph replays reuse them."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from gshmem import Buffer, Comm


def as_bytes(src: torch.Tensor) -> torch.Tensor:
    """``src`` (contiguous) as a flat byte tensor: messages are bytes whatever they hold."""
    import torch

    return src.reshape(-1).view(torch.uint8)


def sequence_major(t: torch.Tensor) -> torch.Tensor:
    """``[batch, heads, seq, dim]`` as a contiguous ``[batch, seq, heads, dim]`` (no copy when
    it already lies that way in memory, as projections give it): a token's heads, or a run of
    tokens, is then one run of bytes on the wire."""
    s = t.transpose(1, 2)
    return s if s.is_contiguous() else s.contiguous()


def held_by(comm: Comm, buf: Buffer) -> Buffer:
    """``buf`` referring to its comm through ``comm``, the ring's weak proxy: what a channel owns
    (and the tensors viewing it) must not keep the comm alive, or a dropped comm and its rings
    would never be collected."""
    from gshmem import Buffer

    return Buffer(comm, buf.ptr, buf.nbytes, buf.pe)


def take_flag(comm: Comm, flag: Buffer, stream: int) -> None:
    """``stream`` waits until this PE's ``flag`` is 1, then resets it to 0 (zero SMs)."""
    comm.signal_wait_until(flag, "eq", 1, stream=stream)
    comm.signal_op(flag, 0, comm.rank, stream=stream)


def put_runs(comm: Comm, credit: Buffer, runs, arrived: Buffer, pe: int, stream: int) -> None:
    """On ``stream``: take ``credit`` (this PE's), put every (destination, source) of ``runs``
    to PE ``pe`` by the copy engines, and set ``pe``'s ``arrived`` to 1 after the last.
    Contiguous runs are puts (the flag travels with the last); strided views (rows at a
    pitch, as ``Comm.put_2d`` takes) are 2-D puts, followed by the flag."""
    take_flag(comm, credit, stream)
    for j, (dst, data) in enumerate(runs):
        last = j == len(runs) - 1
        if _is_run(dst) and _is_run(data):
            if last:
                comm.put_signal(dst, data, arrived, 1, pe, stream=stream)
            else:
                comm.put(dst, data, pe, stream=stream)
        else:
            comm.put_2d(dst, data, pe, stream=stream)
            if last:
                comm.signal_op(arrived, 1, pe, stream=stream)


def _is_run(x) -> bool:
    """A Buffer, or a contiguous tensor: one run of bytes."""
    is_contiguous = getattr(x, "is_contiguous", None)
    return is_contiguous is None or is_contiguous()


__all__ = ["as_bytes", "held_by", "put_runs", "sequence_major", "take_flag"]
