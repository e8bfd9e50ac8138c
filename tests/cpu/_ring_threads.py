"""A ring of threads standing in for GPUs: ring.forward/backward (and gather.forward/backward)
run on one thread per rank, their messages copied through queues (the CPU tests of the
attention and of training)."""

from __future__ import annotations

import math
import queue
import threading

import torch

from gshmem.attention.transport import view_slot


class QueueChannel:
    """A ring channel between threads: a message is a copy of the sender's bytes."""

    def __init__(self, inboxes, right, me, sent):
        self.inboxes, self.right, self.me, self.sent = inboxes, right, me, sent
        self.current = [None, None]

    def message(self, i, shapes, dtype):
        n = sum(math.prod(s) for s in shapes) * dtype.itemsize
        return self.current[i][:n], view_slot(self.current[i], shapes, dtype)

    def wait(self, i):
        self.current[i] = self.inboxes[self.me][i].get(timeout=30)

    def send(self, parts, i):
        self.sent.append((self.me, self.right))
        self.inboxes[self.right][i].put(torch.cat([p.reshape(-1).view(torch.uint8) for p in parts]))

    def release(self, i):
        pass

    def join(self):
        pass


class QueueExchange:
    """A mailbox between threads: each run is a copy of the writer's bytes, written into the
    reader's buffer when it waits; the buffer starts as random bytes, so a read of anything no
    writer sent shows up as garbage."""

    def __init__(self, inboxes, me, nbytes, sent):
        self.inboxes, self.me, self.sent = inboxes, me, sent
        self.buffer = torch.randint(0, 256, (nbytes,), dtype=torch.uint8)
        self.receives = []

    def fork(self):
        pass

    def _at(self, view):
        """(byte offset, shape, strides, dtype) of a view of the buffer: what names the same
        bytes in another rank's buffer."""
        return (view.data_ptr() - self.buffer.data_ptr(), tuple(view.shape), view.stride(),
                view.dtype)  # fmt: skip

    def post(self, sends, receives):
        for reader, dst, src in sends:
            assert dst.numel() * dst.element_size() == src.numel() * src.element_size()
            self.sent.append((self.me, reader))
            self.inboxes[reader].put((self._at(dst), src.contiguous().clone()))
        self.receives = receives

    def wait(self):
        got = []
        for _ in self.receives:
            (offset, shape, strides, dtype), data = self.inboxes[self.me].get(timeout=30)
            typed = self.buffer.view(dtype)
            size = typed.element_size()
            data = (
                data.reshape(-1).view(torch.uint8).view(dtype).reshape(shape)
            )  # the bytes, as dst
            typed.as_strided(shape, strides, offset // size).copy_(data)
            got.append((offset, shape))
        want = [self._at(dst)[:2] for _, dst in self.receives]
        assert sorted(got) == sorted(want), (got, want)

    def copy_out(self, dst, src):
        dst.copy_(src)

    def release(self):
        pass

    def join(self):
        pass


class ThreadRing:
    def __init__(self, world, index, boxes, sent):
        self.world, self.index, self.boxes, self.sent = world, index, boxes, sent

    def channel(self, name, nbytes, reverse=False):
        inboxes = self.boxes.setdefault(
            name, [[queue.Queue(), queue.Queue()] for _ in range(self.world)]
        )
        to = (self.index + (-1 if reverse else 1)) % self.world
        return QueueChannel(inboxes, to, self.index, self.sent.setdefault(name, []))

    def exchange(self, name, nbytes):
        inboxes = self.boxes.setdefault(name, [queue.Queue() for _ in range(self.world)])
        return QueueExchange(inboxes, self.index, nbytes, self.sent.setdefault(name, []))


def run_ring(world, fn, sent=None):
    """``fn(ring)`` on one thread per rank; ``sent``: a dict that receives, per channel name, the
    (sender, receiver) of every message."""
    boxes: dict = {}
    sent = {} if sent is None else sent
    lock = threading.Lock()
    results, errors = [None] * world, []

    def body(r):
        try:
            with lock:
                rg = ThreadRing(world, r, boxes, sent)
                for name in ("kv", "kv_back", "dkv"):
                    rg.channel(name, 0)
                for name in ("kv_gather", "dkv_scatter", "heads_in", "heads_out"):
                    rg.exchange(name, 0)
            results[r] = fn(rg)
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errors.append(e)

    threads = [threading.Thread(target=body, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results
