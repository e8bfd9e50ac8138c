"""Soak: a long run of mixed calls with random sizes, streams and graph replays, every result
checked on the GPU (docs/reliability.md). Run as each rank of `python -m gshmem.run -n N`.

Usage: soak_check.py CALLS [SEED [OPS [STREAMS]]]   (OPS: comma-separated subset; STREAMS: 1 or 2)
Every PE draws the same sequence of calls from SEED (collectives must match): all_reduce (int32
sums, exact), all_gather, broadcast from a random root, an on-stream put_signal ring step, an
on-stream barrier, or the replay of a captured ring step, each on one of two streams (the next
call's stream waits for the previous one's, so calls stay ordered across streams as the
collectives require). Each result is compared with what every PE can regenerate from its seed,
on the GPU (mismatches add to a counter; the host reads it every 500 calls). Prints
"PASS <calls> calls (<per op>), 0 mismatches".
"""

from __future__ import annotations

import random
import sys
from collections import Counter

import torch
from stream_check import neighbours, pattern, seed, sync

import gshmem

OPS = ["all_reduce", "all_gather", "broadcast", "ring", "barrier", "graph"]
SIZES = [1, 7, 1000, 65539, 1 << 18]  # int32 elements
RING_BYTES = [8, 4096, 1 << 20]


def values(tag: int, pe: int, n: int, device: int) -> torch.Tensor:
    """PE `pe`'s int32 input for call `tag`: small values, so sums are exact."""
    return pattern(seed(tag, pe), n, device).to(torch.int32)


def main() -> None:
    calls, base_seed = int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 1
    ops = sys.argv[3].split(",") if len(sys.argv) > 3 else OPS
    nstreams = int(sys.argv[4]) if len(sys.argv) > 4 else 2
    comm = gshmem.init()
    dev, n, me = comm.device, comm.nranks, comm.rank
    right, left = neighbours(comm)
    rng = random.Random(base_seed)
    streams = [torch.cuda.Stream(dev) for _ in range(nstreams)]
    # mismatched elements by op, and the first call that had any
    errors = torch.zeros((len(OPS),), dtype=torch.int64, device=f"cuda:{dev}")
    first_bad = torch.full((), calls + 1, dtype=torch.int64, device=f"cuda:{dev}")

    def tally(op: str, call: int, bad: torch.Tensor) -> None:
        errors[OPS.index(op)] += bad
        first_bad.copy_(torch.where(bad > 0, torch.clamp(first_bad, max=call), first_bad))

    inbox = comm.empty((max(RING_BYTES),), torch.uint8)
    sig = comm.zeros((1,), torch.int64)
    work = comm.empty((max(SIZES) * n,), torch.int32)

    # The captured ring step: new data each replay (a counter on the GPU), SET 1 to the right,
    # wait for 1 from the left, check, reset the signal, stream barrier (flow control).
    gsig = comm.zeros((1,), torch.int64)
    ginbox = comm.empty((4096,), torch.uint8)
    gbase, gleft = pattern(seed(7, me), 4096, dev), pattern(seed(7, left), 4096, dev)
    replays = torch.zeros((), dtype=torch.int64, device=f"cuda:{dev}")
    gsrc, gexpect = torch.empty_like(gbase), torch.empty_like(gbase)
    for _ in range(10):  # eager stream barriers share their counters with the graph's
        comm.barrier_on_stream()
    sync(comm)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        replays.add_(1)
        step = replays.to(torch.uint8)
        torch.add(gbase, step, out=gsrc)
        torch.add(gleft, step, out=gexpect)
        comm.put_signal(ginbox, gsrc, gsig, 1, right)
        comm.signal_wait_until(gsig, "eq", 1)
        errors[OPS.index("graph")] += (ginbox != gexpect).sum()
        gsig.zero_()
        comm.barrier_on_stream()
    sync(comm)

    done: Counter[str] = Counter()
    ring_rounds = 0
    prev = streams[0]
    for call in range(1, calls + 1):
        op = rng.choice(ops)
        s = rng.choice(streams)
        s.wait_stream(prev)
        prev = s
        with torch.cuda.stream(s):
            if op == "all_reduce":
                k = rng.choice(SIZES)
                t = work[:k]
                t.copy_(values(call, me, k, dev))
                comm.all_reduce(t)
                want = sum(values(call, q, k, dev) for q in range(n))
                tally(op, call, (t != want).sum())
            elif op == "all_gather":
                k = rng.choice(SIZES)
                out = work[: k * n].view(n, k)
                comm.all_gather(values(call, me, k, dev), out=out)
                want = torch.stack([values(call, q, k, dev) for q in range(n)])
                tally(op, call, (out != want).sum())
            elif op == "broadcast":
                k, root = rng.choice(SIZES), rng.randrange(n)
                t = work[:k]
                t.copy_(values(call, me, k, dev))
                comm.broadcast(t, root)
                tally(op, call, (t != values(call, root, k, dev)).sum())
            elif op == "ring":
                ring_rounds += 1
                b = rng.choice(RING_BYTES)
                comm.put_signal(inbox[:b], pattern(seed(call, me), b, dev), sig, 1, right,
                                op="add")  # fmt: skip
                comm.signal_wait_until(sig, "ge", ring_rounds)
                tally(op, call, (inbox[:b] != pattern(seed(call, left), b, dev)).sum())
                comm.barrier_on_stream()  # nobody overwrites an inbox before it was checked
            elif op == "barrier":
                comm.barrier_on_stream()
            else:
                graph.replay()
        done[op] += 1
        if call % 500 == 0 or call == calls:
            torch.cuda.synchronize(dev)
            comm.check()  # no device wait gave up
            bad = {o: int(e) for o, e in zip(OPS, errors.tolist(), strict=True) if e}
            assert not bad, (f"by call {call}: mismatched elements {bad}, first at call "
                             f"{int(first_bad.item())} ({dict(done)})")  # fmt: skip
    sync(comm)
    assert int(replays.item()) == done["graph"], "a graph replay was lost"
    summary = ", ".join(f"{k} {v}" for k, v in sorted(done.items()))
    print(f"PASS {calls} calls ({summary}), 0 mismatches", flush=True)
    comm.finalize()


if __name__ == "__main__":
    main()
