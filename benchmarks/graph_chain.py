"""gshmem's small collectives per call in a CUDA graph, without the start skew of processes:
every PE in this one process (gshmem.init_local; two by default), a graph of 200 dependent
calls per PE, the graphs replayed back to back from one thread; prints the median µs per call of
9 replays and checks every PE's output (ordinary tensors in and out). OP=permute (default): each
PE sends its buffer to the next PE in a ring and receives the previous one's (`comm.permute`;
packets at these sizes; two PEs swap); OP=all_reduce: out-of-place
sums (`comm.all_reduce`; GSHMEM_COLL_BACKEND=gshmem for gshmem's kernels at every size). Beside
benchmarks/permute_floor.cu (the permute's protocol in raw CUDA) it says what gshmem's kernels add
to the protocol (docs/benchmarks.md, "The floor of a small permute"). Run on a GPU host:

    python benchmarks/graph_chain.py                # GPUs 0 and 1
    DEVICES=0,0 python benchmarks/graph_chain.py    # both PEs on GPU 0 (no NVLink)
    DEVICES=0,1,2,3 python benchmarks/graph_chain.py  # four PEs, one per GPU
    SIZES=8,65536 python benchmarks/graph_chain.py  # these message sizes (bytes)
    OP=all_reduce GSHMEM_COLL_BACKEND=gshmem python benchmarks/graph_chain.py
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable

import torch

import gshmem

CALLS, REPEATS = 200, 9
SIZES = (8, 512, 4096, 32768, 262144)


def operation(op: str, comms: list, bufs: list, streams: list) -> tuple[Callable, Callable]:
    """(call(r, n): PE r's call on its first n floats, expected(r): what PE r must receive);
    PE r's input holds r + 1."""
    npes = len(comms)

    def permute(r: int, n: int) -> None:
        to, frm = (r + 1) % npes, (r - 1) % npes
        comms[r].permute(bufs[r][0][:n], to, frm, out=bufs[r][1][:n], stream=streams[r])

    def all_reduce(r: int, n: int) -> None:
        comms[r].all_reduce(bufs[r][0][:n], out=bufs[r][1][:n], stream=streams[r])

    if op == "permute":
        return permute, lambda r: (r - 1) % npes + 1
    if op == "all_reduce":
        return all_reduce, lambda r: npes * (npes + 1) // 2
    raise SystemExit(f"OP is permute or all_reduce, not {op!r}")


def main() -> None:
    devices = [int(d) for d in os.environ.get("DEVICES", "0,1").split(",")]
    if len(devices) < 2:
        raise SystemExit("DEVICES names two GPUs or more (one PE each; a GPU may repeat)")
    sizes = [int(b) for b in os.environ["SIZES"].split(",")] if "SIZES" in os.environ else SIZES
    comms = gshmem.init_local(devices)
    npes = len(devices)
    words = max(sizes) // 4
    # ordinary tensors, as XLA's buffers (below 16 MiB a permute takes the same path either way)
    bufs = [[torch.empty(words, device=f"cuda:{d}") for _ in range(2)] for d in devices]
    streams = []
    for d in devices:
        with torch.cuda.device(d):
            streams.append(torch.cuda.Stream())
    call, expected = operation(os.environ.get("OP", "permute"), comms, bufs, streams)
    print(f"{'bytes':>8s} {'us/call':>8s} {'min':>8s}  values")
    for size in sizes:
        n = max(1, size // 4)
        for r in range(npes):
            bufs[r][0][:n].fill_(r + 1)
            bufs[r][1][:n].fill_(-1)
        for d in devices:
            torch.cuda.synchronize(d)
        for _ in range(3):  # warm-up, every PE at once (each waits for the others)
            for r in range(npes):
                with torch.cuda.device(devices[r]):
                    call(r, n)
        graphs = []
        for r in range(npes):
            with torch.cuda.device(devices[r]):
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, stream=streams[r]):
                    for _ in range(CALLS):
                        call(r, n)
                graphs.append(g)
        times = []
        for _ in range(REPEATS):
            for d in devices:
                torch.cuda.synchronize(d)
            events = []
            for r in range(npes):
                with torch.cuda.device(devices[r]):
                    start = torch.cuda.Event(enable_timing=True)
                    stop = torch.cuda.Event(enable_timing=True)
                    start.record(streams[r])
                    with torch.cuda.stream(streams[r]):
                        graphs[r].replay()
                    stop.record(streams[r])
                    events.append((start, stop))
            for d in devices:
                torch.cuda.synchronize(d)
            times.append(max(a.elapsed_time(b) for a, b in events) * 1e3 / CALLS)
        ok = all(bool((bufs[r][1][:n] == expected(r)).all()) for r in range(npes))
        print(f"{size:8d} {statistics.median(times):8.3f} {min(times):8.3f}  "
              f"{'ok' if ok else 'WRONG'}", flush=True)  # fmt: skip
    gshmem.for_each(comms, lambda c: c.finalize())


if __name__ == "__main__":
    main()
