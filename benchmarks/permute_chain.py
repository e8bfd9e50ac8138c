"""gshmem's permute kernel per call in a CUDA graph, without the start skew of two processes:
two PEs in this one process (gshmem.init_local), a graph of 200 dependent `comm.permute` calls
per PE (each PE swaps its buffer with the other's, packets at these sizes), both graphs replayed
back to back from one thread; prints the median µs per call of 9 replays and checks that every
PE received the other's values. Beside benchmarks/permute_floor.cu (the same swap protocol in
raw CUDA) it says what gshmem's kernel adds to the protocol (docs/benchmarks.md, "The floor of a
small permute"). Run on a GPU host:

    python benchmarks/permute_chain.py          # GPUs 0 and 1
    DEVICES=0,0 python benchmarks/permute_chain.py   # both PEs on GPU 0 (no NVLink)
    SIZES=8,65536 python benchmarks/permute_chain.py   # these message sizes (bytes)
"""

from __future__ import annotations

import os
import statistics

import torch

import gshmem

CALLS, REPEATS = 200, 9
SIZES = (8, 512, 4096, 32768, 262144)


def main() -> None:
    devices = [int(d) for d in os.environ.get("DEVICES", "0,1").split(",")]
    if len(devices) != 2:
        raise SystemExit("DEVICES names two GPUs (the same one twice for two PEs on it)")
    sizes = [int(b) for b in os.environ["SIZES"].split(",")] if "SIZES" in os.environ else SIZES
    comms = gshmem.init_local(devices)
    words = max(sizes) // 4
    bufs = gshmem.for_each(comms, lambda c: (c.empty(words, torch.float32),
                                             c.empty(words, torch.float32)))  # fmt: skip
    streams = []
    for d in devices:
        with torch.cuda.device(d):
            streams.append(torch.cuda.Stream())
    print(f"{'bytes':>8s} {'us/call':>8s} {'min':>8s}  values")
    for size in sizes:
        n = max(1, size // 4)

        def call(r: int, n: int = n) -> None:
            src, out = bufs[r][0][:n], bufs[r][1][:n]
            comms[r].permute(src, 1 - r, 1 - r, out=out, stream=streams[r])

        for r in range(2):
            bufs[r][0][:n].fill_(r + 1)
            bufs[r][1][:n].fill_(-1)
        for d in devices:
            torch.cuda.synchronize(d)
        for _ in range(3):  # warm-up, both PEs at once (each waits for the other)
            for r in range(2):
                with torch.cuda.device(devices[r]):
                    call(r)
        graphs = []
        for r in range(2):
            with torch.cuda.device(devices[r]):
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, stream=streams[r]):
                    for _ in range(CALLS):
                        call(r)
                graphs.append(g)
        times = []
        for _ in range(REPEATS):
            for d in devices:
                torch.cuda.synchronize(d)
            events = []
            for r in range(2):
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
        ok = all(bool((bufs[r][1][:n] == 2 - r).all()) for r in range(2))
        print(f"{size:8d} {statistics.median(times):8.3f} {min(times):8.3f}  "
              f"{'ok' if ok else 'WRONG'}", flush=True)  # fmt: skip
    gshmem.for_each(comms, lambda c: c.finalize())


if __name__ == "__main__":
    main()
