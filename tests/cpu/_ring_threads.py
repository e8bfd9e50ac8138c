"""A ring of threads standing in for GPUs: ring.forward/backward run on one thread per rank,
their messages copied through queues (the CPU tests of the attention and of training)."""

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


class ThreadRing:
    def __init__(self, world, index, boxes, sent):
        self.world, self.index, self.boxes, self.sent = world, index, boxes, sent

    def channel(self, name, nbytes, reverse=False):
        inboxes = self.boxes.setdefault(
            name, [[queue.Queue(), queue.Queue()] for _ in range(self.world)]
        )
        to = (self.index + (-1 if reverse else 1)) % self.world
        return QueueChannel(inboxes, to, self.index, self.sent.setdefault(name, []))


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
