"""Moving shards around the ring: the same calls over gshmem or over NCCL.

A *channel* passes one message per step to the right neighbour and receives one from the left
into two alternating slots (double buffering); a reversed channel passes them leftwards. The ring
loop (ring.py) calls, per step s:

    wait(s % 2)              # the compute stream may read slot s % 2 (the left neighbour's message)
    message(s % 2, shapes, dtype)  # (its bytes, tensors of ``shapes`` viewing them)
    send(parts, (s+1) % 2)   # the parts, one after another, to the right neighbour's slot (s+1) % 2
    ...compute...
    release(s % 2)           # this rank is done with slot s % 2: the left neighbour may refill it
                             # (once this rank's own sends have read it)
    join()                   # at the end: the compute stream waits for everything the channel did

``GshmemChannel`` (zero SMs): the slots are symmetric memory; a send is a copy-engine put plus a
stream memory-operation signal, issued on the channel's own stream so it overlaps the compute
stream's attention. Flow control is a credit per slot: the sender waits until the receiver has
released the slot, resets the credit, puts, and sets the receiver's arrival flag; the receiver
waits for the flag, resets it, reads, and gives the credit back from its compute stream. Every
flag goes 0 -> 1 -> 0 within a call, so a call leaves the flags as it found them: CUDA-graph
replays and later calls reuse them without any host involvement. A sent tensor is kept alive
until ``join``: the side stream may still be reading it after the caller has dropped it, and
torch's allocator would otherwise hand its memory to the compute stream. ``NcclChannel``: the
same schedule over ``torch.distributed.batch_isend_irecv`` (NCCL kernels on NCCL's stream), the
baseline that differs only in transport.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from gshmem._errors import UsageError
from gshmem.attention.exchange import GshmemExchange, NcclExchange
from gshmem.attention.wire import as_bytes, held_by, put_runs, take_flag

if TYPE_CHECKING:
    from collections.abc import Sequence

    import torch

    from gshmem import Comm
    from gshmem.team import Team


def view_slot(slot: torch.Tensor, shapes, dtype: torch.dtype) -> list[torch.Tensor]:
    """Tensors of ``shapes`` (one after another, ``dtype``) viewing the start of a byte slot."""
    out, offset = [], 0
    size = dtype.itemsize
    for shape in shapes:
        n = math.prod(shape) * size
        out.append(slot[offset : offset + n].view(dtype).view(shape))
        offset += n
    return out


class SlotPair:
    """Two receive slots of ``nbytes`` (a ``[2, nbytes]`` uint8 tensor) and the views of the
    messages in them, made once per (slot, shapes, dtype): the ring asks for them every step."""

    def __init__(self, slots: torch.Tensor) -> None:
        self.slots, self.nbytes = slots, slots.shape[1]
        self._messages: dict[tuple, tuple[torch.Tensor, list[torch.Tensor]]] = {}

    def message(self, i: int, shapes, dtype: torch.dtype):
        key = (i, tuple(shapes), dtype)
        found = self._messages.get(key)
        if found is None:
            n = sum(math.prod(s) for s in shapes) * dtype.itemsize
            flat = self.slots[i][:n]
            found = self._messages[key] = (flat, view_slot(flat, shapes, dtype))
        return found

    def _check(self, nbytes: int) -> None:
        if nbytes > self.nbytes:
            raise UsageError(f"ring message of {nbytes} B exceeds its {self.nbytes} B slot")


class GshmemChannel(SlotPair):
    """Two symmetric slots of ``nbytes`` and four flags per PE (collective to create)."""

    def __init__(self, comm: Comm, right: int, left: int, nbytes: int) -> None:
        import torch

        self.memory = held_by(comm, comm.malloc(2 * nbytes))
        super().__init__(torch.from_dlpack(self.memory).view(2, nbytes))
        self.comm, self.right, self.left = comm, right, left
        # Buffers, not tensors, for what every step names: each call then costs less host time.
        self.flags = held_by(comm, comm.calloc(4 * 8))  # arrived[2], credit[2]
        self.arrived = [self.flags.view(8 * i, 8) for i in range(2)]
        self.credit = [self.flags.view(8 * (2 + i), 8) for i in range(2)]
        self.dst = [self.memory.view(i * nbytes, nbytes) for i in range(2)]
        torch.from_dlpack(self.flags).view(torch.int64)[2:].fill_(1)  # both right slots free
        self.stream = torch.cuda.Stream(device=comm.device)
        self.side = self.stream.cuda_stream
        self.pending: list[torch.Tensor] = []  # sent tensors the side stream may still read
        torch.cuda.synchronize(comm.device)
        comm.barrier()

    def _current(self) -> int:
        import torch

        return torch.cuda.current_stream(self.comm.device).cuda_stream

    def wait(self, i: int) -> None:
        take_flag(self.comm, self.arrived[i], self._current())

    def send(self, parts: Sequence[torch.Tensor], i: int) -> None:
        """Puts ``parts`` one after another into the right neighbour's slot ``i``: one
        copy-engine put each (no packing copy on the compute stream), the arrival flag with the
        last."""
        import torch

        c, data = self.comm, [as_bytes(p) for p in parts]
        self._check(sum(d.numel() for d in data))
        self.stream.wait_stream(torch.cuda.current_stream(c.device))
        runs, offset = [], 0
        for d in data:
            runs.append((self.dst[i].view(offset, d.numel()), d))
            offset += d.numel()
        put_runs(c, self.credit[i], runs, self.arrived[i], self.right, self.side)
        self.pending.extend(data)

    def release(self, i: int) -> None:
        """Gives slot ``i`` back once the compute stream's reads and this channel's puts out of
        it (a message passed on as it came) are done."""
        import torch

        torch.cuda.current_stream(self.comm.device).wait_stream(self.stream)
        self.comm.signal_op(self.credit[i], 1, self.left, stream=self._current())

    def join(self) -> None:
        import torch

        torch.cuda.current_stream(self.comm.device).wait_stream(self.stream)
        self.pending.clear()  # freed after the join: reuse is ordered after the side stream

    def close(self) -> None:
        """Collective: frees the symmetric memory."""
        self._messages.clear()
        self.slots = None
        self.comm.free(self.memory)
        self.comm.free(self.flags)


class NcclChannel(SlotPair):
    """The same calls over torch.distributed (NCCL); ranks are world ranks of the gshmem comm."""

    def __init__(self, device: int, right: int, left: int, nbytes: int) -> None:
        import torch

        super().__init__(torch.empty((2, nbytes), dtype=torch.uint8, device=f"cuda:{device}"))
        self.right, self.left = right, left
        self.works: list[list] = [[], []]

    def wait(self, i: int) -> None:
        for w in self.works[i]:
            w.wait()
        self.works[i] = []

    def send(self, parts: Sequence[torch.Tensor], i: int) -> None:
        import torch.distributed as dist

        data = [as_bytes(p) for p in parts]
        self._check(sum(d.numel() for d in data))
        ops, offset = [], 0
        for d in data:  # every rank sends the same parts in the same order at a step
            ops.append(dist.P2POp(dist.isend, d, self.right))
            into = self.slots[i][offset : offset + d.numel()]
            ops.append(dist.P2POp(dist.irecv, into, self.left))
            offset += d.numel()
        self.works[i] = dist.batch_isend_irecv(ops)

    def release(self, i: int) -> None:
        """Nothing to do: NCCL's stream orders a later receive into this slot after the reads
        the compute stream made of it (the receive is issued after them)."""

    def join(self) -> None:
        """Nothing to do: every receive was waited for by ``wait``, and NCCL keeps a sent
        tensor alive until its work is waited for."""

    def close(self) -> None:
        self._messages.clear()
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
        self.members = members
        self.channels: dict[str, GshmemChannel | NcclChannel] = {}
        self.exchanges: dict[str, GshmemExchange | NcclExchange] = {}
        self.peer_streams: dict = {}  # the mailboxes' put streams, one per reader, shared
        self.problems: dict[tuple, Any] = {}  # local call signature -> its checked Problem
        self.replays: dict[tuple, Any] = {}  # (direction, signature) -> replay.run's state

    def channel(self, name: str, nbytes: int, reverse: bool = False) -> GshmemChannel | NcclChannel:
        """The channel ``name`` (towards the right neighbour, or the left one when ``reverse``)
        with slots of at least ``nbytes``; a name keeps the direction it was first made with."""
        to, fro = (self.left, self.right) if reverse else (self.right, self.left)
        if self.backend == "gshmem":
            return self._grown(self.channels, name, nbytes,
                               lambda: GshmemChannel(self.comm, to, fro, nbytes))  # fmt: skip
        return self._grown(self.channels, name, nbytes,
                           lambda: NcclChannel(self.comm.device, to, fro, nbytes))  # fmt: skip

    def exchange(self, name: str, nbytes: int) -> GshmemExchange | NcclExchange:
        """The mailbox ``name`` (exchange.py) of at least ``nbytes``; growing is collective.
        All of a ring's mailboxes put to a reader on one stream, in the order they post."""
        if self.backend == "gshmem":
            return self._grown(self.exchanges, name, nbytes, lambda: GshmemExchange(
                self.comm, self.members, self.index, nbytes, self.peer_streams))  # fmt: skip
        return self._grown(self.exchanges, name, nbytes, lambda: NcclExchange(
            self.comm.device, self.members, self.index, nbytes))  # fmt: skip

    def _grown(self, owned: dict, name: str, nbytes: int, make):
        """``owned[name]`` when it holds ``nbytes``, else a new one from ``make()`` (the old one
        closed, and the captured calls that name its memory dropped)."""
        old = owned.get(name)
        if old is not None and old.nbytes >= nbytes:
            return old
        if old is not None:
            self.replays.clear()
            old.close()
        owned[name] = make()
        return owned[name]


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


__all__ = [
    "BACKENDS",
    "GshmemChannel",
    "NcclChannel",
    "Ring",
    "SlotPair",
    "resolve_backend",
    "view_slot",
]
