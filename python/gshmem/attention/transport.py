"""Moving shards around the ring: the same four calls over gshmem or over NCCL.

A *channel* passes one message per step to the right neighbour and receives one from the left
into two alternating slots (double buffering). The ring loop (ring.py) calls, per step s:

    wait(s % 2)          # the compute stream may read slot s % 2 (what the left neighbour sent)
    send(src, (s+1) % 2) # src goes to the right neighbour's slot (s+1) % 2
    ...compute...
    release(s % 2)       # this rank is done with slot s % 2: the left neighbour may refill it
    join()               # at the end: the compute stream waits for everything the channel did

``GshmemChannel`` (zero SMs): the slots are symmetric memory; a send is a copy-engine put plus a
stream memory-operation signal, issued on the channel's own stream so it overlaps the compute
stream's attention. Flow control is a credit per slot: the sender waits until the receiver has
released the slot, resets the credit, puts, and sets the receiver's arrival flag; the receiver
waits for the flag, resets it, reads, and gives the credit back. Every flag goes 0 -> 1 -> 0
within a call, so a call leaves the flags as it found them: CUDA-graph replays and later calls
reuse them without any host involvement. ``NcclChannel``: the same schedule over
``torch.distributed.batch_isend_irecv`` (NCCL kernels on NCCL's stream), the baseline that
differs only in transport.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from gshmem._errors import UsageError

if TYPE_CHECKING:
    import torch

    from gshmem.comm import Comm
    from gshmem.team import Team

ARRIVED, CREDIT = 0, 2  # offsets of the two per-slot flag pairs in a channel's signal tensor


def view_slot(slot: torch.Tensor, shapes, dtype: torch.dtype) -> list[torch.Tensor]:
    """Tensors of ``shapes`` (one after another, ``dtype``) viewing the start of a byte slot."""
    out, offset = [], 0
    size = dtype.itemsize
    for shape in shapes:
        n = math.prod(shape) * size
        out.append(slot[offset : offset + n].view(dtype).view(shape))
        offset += n
    return out


def _bytes(src: torch.Tensor) -> torch.Tensor:
    """``src`` (contiguous) as a flat byte tensor: messages are bytes whatever they hold."""
    import torch

    return src.reshape(-1).view(torch.uint8)


class GshmemChannel:
    """Two symmetric slots of ``nbytes`` and four flags per PE (collective to create)."""

    def __init__(self, comm: Comm, right: int, left: int, nbytes: int) -> None:
        import torch

        self.comm, self.right, self.left, self.nbytes = comm, right, left, nbytes
        self.slots = comm.empty((2, nbytes), torch.uint8)
        self.flags = comm.zeros((4,), torch.int64)  # arrived[2], credit[2]
        self.flags[CREDIT:].fill_(1)  # both of the right neighbour's slots start free
        self.stream = torch.cuda.Stream(device=comm.device)
        torch.cuda.synchronize(comm.device)
        comm.barrier()

    def flag(self, which: int, slot: int) -> torch.Tensor:
        return self.flags[which + slot : which + slot + 1]

    def slot(self, i: int) -> torch.Tensor:
        return self.slots[i]

    def wait(self, i: int) -> None:
        c = self.comm
        c.signal_wait_until(self.flag(ARRIVED, i), "eq", 1)
        c.signal_op(self.flag(ARRIVED, i), 0, c.rank)

    def send(self, src: torch.Tensor, i: int) -> None:
        import torch

        c, m = self.comm, self.stream
        data = _bytes(src)
        if data.numel() > self.nbytes:
            raise UsageError(f"ring message of {data.numel()} B exceeds its {self.nbytes} B slot")
        m.wait_stream(torch.cuda.current_stream(c.device))
        c.signal_wait_until(self.flag(CREDIT, i), "eq", 1, stream=m)
        c.signal_op(self.flag(CREDIT, i), 0, c.rank, stream=m)
        c.put_signal(self.slots[i][: data.numel()], data, self.flag(ARRIVED, i), 1, self.right,
                     stream=m)  # fmt: skip

    def release(self, i: int) -> None:
        import torch

        c, m = self.comm, self.stream
        m.wait_stream(torch.cuda.current_stream(c.device))
        c.signal_op(self.flag(CREDIT, i), 1, self.left, stream=m)

    def join(self) -> None:
        import torch

        torch.cuda.current_stream(self.comm.device).wait_stream(self.stream)

    def close(self) -> None:
        """Collective: frees the symmetric memory."""
        self.comm.free(self.slots)
        self.comm.free(self.flags)


class NcclChannel:
    """The same calls over torch.distributed (NCCL); ranks are world ranks of the gshmem comm."""

    def __init__(self, device: int, right: int, left: int, nbytes: int) -> None:
        import torch

        self.right, self.left, self.nbytes = right, left, nbytes
        self.slots = torch.empty((2, nbytes), dtype=torch.uint8, device=f"cuda:{device}")
        self.works: list[list] = [[], []]

    def slot(self, i: int) -> torch.Tensor:
        return self.slots[i]

    def wait(self, i: int) -> None:
        for w in self.works[i]:
            w.wait()
        self.works[i] = []

    def send(self, src: torch.Tensor, i: int) -> None:
        import torch.distributed as dist

        data = _bytes(src)
        ops = [
            dist.P2POp(dist.isend, data, self.right),
            dist.P2POp(dist.irecv, self.slots[i][: data.numel()], self.left),
        ]
        self.works[i] = dist.batch_isend_irecv(ops)

    def release(self, i: int) -> None:
        """Nothing to do: NCCL's stream orders a later receive into this slot after the reads
        the compute stream made of it (the receive is issued after them)."""

    def join(self) -> None:
        """Nothing to do: every receive was waited for by ``wait``."""

    def close(self) -> None:
        self.slots = None


BACKENDS = ("auto", "gshmem", "nccl")


class Ring:
    """The ring of one team of one comm over one backend: its neighbours and its channels
    (by name, grown when a call needs larger slots; growing is collective)."""

    def __init__(self, comm: Comm, team: Team, backend: str) -> None:
        members, me = team.members(), team.rank
        self.comm, self.team, self.backend = comm, team, backend
        self.world, self.index = len(members), me
        self.right = members[(me + 1) % len(members)]
        self.left = members[(me - 1) % len(members)]
        self.channels: dict[str, GshmemChannel | NcclChannel] = {}
        self.checked: set[tuple] = set()

    def channel(self, name: str, nbytes: int) -> GshmemChannel | NcclChannel:
        ch = self.channels.get(name)
        if ch is not None and ch.nbytes >= nbytes:
            return ch
        if ch is not None:
            ch.close()
        if self.backend == "gshmem":
            ch = GshmemChannel(self.comm, self.right, self.left, nbytes)
        else:
            ch = NcclChannel(self.comm.device, self.right, self.left, nbytes)
        self.channels[name] = ch
        return ch


def resolve_backend(comm: Comm, members: list[int], backend: str) -> str:
    """``backend`` with "auto" decided: gshmem when both ring neighbours are load/store
    reachable, else NCCL when torch.distributed is initialised, else a clear error."""
    if backend not in BACKENDS:
        raise UsageError(f"backend must be one of {BACKENDS}, got {backend!r}")
    me = members.index(comm.rank)
    neighbours = {members[(me + 1) % len(members)], members[(me - 1) % len(members)]}
    base = comm.heap_info()["heap_base"]
    reachable = all(comm.ptr(base, pe) is not None for pe in neighbours)
    if backend == "gshmem" and not reachable:
        raise UsageError(
            "ring_attention: backend='gshmem' needs the ring neighbours to be load/store "
            "reachable (same host, P2P on); use backend='nccl' for other peers"
        )
    if backend == "nccl" or (backend == "auto" and not reachable):
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            raise UsageError(
                "ring_attention: backend='nccl' needs torch.distributed initialised with NCCL, "
                "with the same ranks as the gshmem comm"
            )
        return "nccl"
    return "gshmem"


__all__ = ["BACKENDS", "GshmemChannel", "NcclChannel", "Ring", "resolve_backend", "view_slot"]
