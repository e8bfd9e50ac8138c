"""Mailboxes for the all-gather schedule (gather.py): every member of a team may write runs of
bytes into every other member's receive buffer, once per round. The same calls over gshmem or
over NCCL; the loop calls, per round:

    fork()                 # the transfers posted next follow the compute stream's work so far
    ...queue compute...    # (not what is queued after this point)
    post(sends, receives)  # sends: (reader index, view of the mailbox, local tensor);
                           # receives: (writer index, view of the mailbox) this rank expects
    ...compute...
    wait()                 # the compute stream may read what every expected writer sent
    copy_out(dst, src)     # a copy out of the mailbox, off the compute stream where it can be
    release()              # done reading: the writers may write the next round
    join()                 # the compute stream waits for everything the mailbox did

A destination is a view of ``buffer`` (any dtype and shape): the writer's view names the same
bytes of the reader's mailbox. A source of the same bytes may be contiguous (one run) or, with
a destination of its shape and dtype, rows at one pitch (``Comm.put_2d``: a slice of heads or
tokens of a larger tensor moves without packing).

``GshmemExchange`` (zero SMs): the mailbox is symmetric memory; the runs to one reader are
copy-engine puts on a stream of their own (one per reader, so the transfers to different peers
run at once), the last with a stream memory-operation flag. Flow control is a credit per
(writer, reader): a writer waits until the reader has released its mailbox, resets the credit,
puts and raises its arrival flag at the reader; the reader waits for the flags of its writers,
resets them, and hands the credits back after its reads. Every flag ends a round as it began,
so CUDA-graph replays and later calls reuse them without the host. ``NcclExchange``: the same
rounds over ``torch.distributed.batch_isend_irecv``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gshmem._errors import UsageError
from gshmem.attention.wire import held_by, put_runs, take_flag

if TYPE_CHECKING:
    from collections.abc import Sequence

    import torch

    from gshmem import Comm

Send = tuple[int, "torch.Tensor", "torch.Tensor"]  # (reader index, mailbox view, local source)
Receive = tuple[int, "torch.Tensor"]  # (writer index, mailbox view)


def check_inside(box: torch.Tensor, view: torch.Tensor) -> None:
    """``view`` lies in the mailbox ``box`` (a flat byte tensor), or a UsageError."""
    start = view.data_ptr() - box.data_ptr()
    end = start + view.element_size() * (
        1 + sum((n - 1) * st for n, st in zip(view.shape, view.stride(), strict=True))
    )
    if view.numel() and not (0 <= start and end <= box.numel()):
        raise UsageError(f"exchange: a run at bytes [{start}, {end}) is outside the "
                         f"{box.numel()} B mailbox")  # fmt: skip


class GshmemExchange:
    """A symmetric mailbox of ``nbytes`` per member and two flags per member pair (collective
    to create). ``members``: the PEs of the team, by team index; ``me``: this rank's index;
    ``streams``: the per-reader streams to use (filled in where missing), shared by mailboxes
    whose rounds must reach a reader in the order they are posted."""

    def __init__(self, comm: Comm, members: Sequence[int], me: int, nbytes: int,
                 streams: dict | None = None) -> None:  # fmt: skip
        import torch

        w = len(members)
        self.comm, self.members, self.me, self.nbytes = comm, list(members), me, nbytes
        self.memory = held_by(comm, comm.malloc(max(nbytes, 1)))
        self.buffer = torch.from_dlpack(self.memory)[:nbytes]
        self.flags = held_by(comm, comm.calloc(2 * w * 8))  # arrived[writer], credit[reader]
        self.arrived = [self.flags.view(8 * i, 8) for i in range(w)]
        self.credit = [self.flags.view(8 * (w + i), 8) for i in range(w)]
        torch.from_dlpack(self.flags).view(torch.int64)[w:].fill_(1)  # every mailbox free
        if streams is None:  # one stream per reader; shared ones keep several mailboxes' puts
            streams = {}  # to a reader in the order they were posted
        for i in range(w):
            if i != me and i not in streams:
                streams[i] = torch.cuda.Stream(device=comm.device)
        self.streams = streams
        self.copies = torch.cuda.Stream(device=comm.device)
        self.forked = torch.cuda.Event()
        self.writers: list[int] = []
        self.used: list = []  # the side streams this round forked (only those are joined)
        self.pending: list[torch.Tensor] = []  # sent tensors a side stream may still read
        torch.cuda.synchronize(comm.device)
        comm.barrier()

    def _current(self):
        import torch

        return torch.cuda.current_stream(self.comm.device)

    def fork(self) -> None:
        self.forked.record(self._current())

    def post(self, sends: Sequence[Send], receives: Sequence[Receive]) -> None:
        """Starts this round's puts (after the compute stream's work up to ``fork``) and notes
        the writers to wait for."""
        by_reader: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}
        for reader, dst, src in sends:  # every run checked before anything is enqueued
            check_inside(self.buffer, dst)
            by_reader.setdefault(reader, []).append((dst, src))
        for reader, runs in by_reader.items():
            st = self.streams[reader]
            st.wait_event(self.forked)
            self.used.append(st)
            put_runs(self.comm, self.credit[reader], runs, self.arrived[self.me],
                     self.members[reader], st.cuda_stream)  # fmt: skip
            self.pending.extend(data for _, data in runs)
        self.writers = sorted({w for w, _ in receives})

    def wait(self) -> None:
        cur = self._current().cuda_stream
        for w in self.writers:
            take_flag(self.comm, self.arrived[w], cur)

    def copy_out(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        """``dst.copy_(src)`` on a side stream after the compute stream's work so far."""
        import torch

        self.copies.wait_stream(self._current())
        self.used.append(self.copies)
        with torch.cuda.stream(self.copies):
            dst.copy_(src)

    def release(self) -> None:
        """Credits back to this round's writers, once the compute stream's reads and the
        side copies out of the mailbox are done."""
        c, cur = self.comm, self._current()
        if self.copies in self.used:
            cur.wait_stream(self.copies)
        for w in self.writers:
            c.signal_op(self.credit[self.me], 1, self.members[w], stream=cur.cuda_stream)

    def join(self) -> None:
        cur = self._current()
        for st in dict.fromkeys(self.used):  # a stream not forked this round is not waited
            cur.wait_stream(st)  # for: inside a graph capture that would be an error
        self.used.clear()
        self.pending.clear()  # freed after the join: reuse is ordered after the side streams

    def close(self) -> None:
        """Collective: frees the symmetric memory."""
        self.buffer = None
        self.comm.free(self.memory)
        self.comm.free(self.flags)


class NcclExchange:
    """The same rounds over torch.distributed (NCCL); members are world ranks of the comm."""

    def __init__(self, device: int, members: Sequence[int], me: int, nbytes: int) -> None:
        import torch

        self.members, self.me, self.nbytes = list(members), me, nbytes
        self.buffer = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{device}")
        self.works: list = []
        self.unpack: list = []  # (strided mailbox view, contiguous receive) to copy at wait
        self.side = torch.cuda.Stream(device=device)  # NCCL follows the stream it is issued on
        self.forked = torch.cuda.Event()

    def fork(self) -> None:
        import torch

        self.forked.record(torch.cuda.current_stream(self.buffer.device))

    def post(self, sends: Sequence[Send], receives: Sequence[Receive]) -> None:
        """Every pair lists its runs in one order (the schedule's), which NCCL matches."""
        import torch
        import torch.distributed as dist

        for _, dst in receives:
            check_inside(self.buffer, dst)
        self.side.wait_event(self.forked)
        with torch.cuda.stream(self.side):  # packing and unpacking buffers follow the fork too
            ops = [dist.P2POp(dist.isend, src.contiguous(), self.members[r])
                   for r, _, src in sends]  # fmt: skip
            for w, dst in receives:  # NCCL receives into contiguous memory: strided views later
                into = dst
                if not dst.is_contiguous():
                    into = torch.empty(dst.shape, dtype=dst.dtype, device=dst.device)
                    self.unpack.append((dst, into))
                ops.append(dist.P2POp(dist.irecv, into, self.members[w]))
            self.works = dist.batch_isend_irecv(ops) if ops else []

    def wait(self) -> None:
        import torch

        for w in self.works:
            w.wait()
        self.works = []
        for dst, got in self.unpack:
            dst.copy_(got)
            got.record_stream(torch.cuda.current_stream(dst.device))  # freed after the copy
        self.unpack.clear()

    def copy_out(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        dst.copy_(src)

    def release(self) -> None:
        """Nothing to do: a later receive into the mailbox is issued after these reads."""

    def join(self) -> None:
        """Nothing to do: ``wait`` waited for every receive; NCCL keeps sent tensors alive."""

    def close(self) -> None:
        self.buffer = None


__all__ = ["GshmemExchange", "NcclExchange", "Receive", "Send"]
