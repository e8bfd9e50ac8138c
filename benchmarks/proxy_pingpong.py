"""What the proxy path costs on its own, without a network and with host threads where a
comm has kernels: put_signal ping-pong between two processes on this host, BYTES bytes (default
8). Two ways of driving it:

- ``proxies``: each side a host thread producing descriptors into its proxy queue, the proxy
  thread executing them on UCX (src/proxy), the signal applied by the other side's proxy thread
  (queue -> proxy thread -> UCX -> the target's proxy applies the signal -> the target's host
  thread sees it);
- ``engine``: each side's thread calls the network engine itself and progresses it while it
  waits (no proxy thread): what the engine and UCX's transports cost.

Each over three transport settings: UCX limited to TCP; UCX's own choice with the endpoints in
UCX's peer-failure mode (GSHMEM_PROXY_LOCAL_SHM=0: no shared-memory transport qualifies); and
UCX's own choice with peers on this host out of that mode (the default: shared memory).

And over the memories in MEMORY (comma-separated; default ``host``), which split a GPU
put_signal's time into its parts on a GPU host (docs/network.md):

- ``host``: data and signal words in host memory, signals applied by the CPU;
- ``gpu``: data in GPU memory (rank r on GPU r % count), so UCX moves it by CUDA IPC (or
  copies it for TCP); signal words still in host memory, applied by the CPU;
- ``gpu_sink``: as ``gpu``, and every arriving signal applied by a one-thread kernel (the GPU
  sink a comm installs, src/proxy/gpu_sink.h) into a pinned host word that kernels and this
  thread both see: what a comm's proxy path adds to ``gpu`` per signal.

And how the put travels, PUT: ``put`` (default: a UCX put, a flush, then the signal) or
``inline`` (the bytes in the message that carries the signal, at most 1 KiB: what a kernel's
put_signal of up to 1 KiB is since the inline puts; 4 or 8 aligned bytes from a kernel go as a
value message instead).

The device-initiated figure (a kernel's descriptor in, a kernel polling the signal out) is
``python -m gshmem.bench p2p --path proxy --only latency``; the difference from ``gpu_sink`` is
the kernels' side.

Prints the median one-way latency (half a round trip) of 5 runs of ITERS round trips, and the
time per put_signal in bursts of BURST (one side sends BURST in a row, the other answers the
last with one of its own: how well put_signals overlap; the answer's round trip is included).
A floor for the proxy path's own overhead, not the GPU-initiated figure over InfiniBand.

    python benchmarks/proxy_pingpong.py            (needs UCX: pip install libucx-cu13)
    MEMORY=host,gpu,gpu_sink python benchmarks/proxy_pingpong.py    (a GPU host; torch)
    BYTES=1024 PUT=inline python benchmarks/proxy_pingpong.py
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import numpy as np

ITERS, WARMUP, REPEATS = int(os.environ.get("ITERS", 2000)), 200, 5
BURST, BURSTS = 64, int(os.environ.get("BURSTS", 100))
BYTES, PUT = int(os.environ.get("BYTES", 8)), os.environ.get("PUT", "put")
PUTS = ("put", "inline")
INLINE_MAX = 1024  # proxy_queue.h kInlineBytes
# (label, UCX_TLS, the engine's local_shm)
SETTINGS = (("tcp", "tcp", True), ("all, peer-failure", "all", False), ("all", "all", True))
MODES = ("engine", "proxies")
MEMORIES = ("host", "gpu", "gpu_sink")


def buffers(rank: int, memory: str) -> tuple[list[object], int, int, np.ndarray, int | None]:
    """The buffers of one rank: (what keeps them alive, source address, destination address,
    the signal word as an array this thread reads, the GPU the data is on or None)."""
    sig = np.zeros(1, np.uint64)
    if memory == "host":
        src, dst = np.zeros(BYTES, np.uint8), np.zeros(BYTES, np.uint8)
        return [src, dst], addr(src), addr(dst), sig, None
    import torch

    device = rank % torch.cuda.device_count()
    torch.cuda.set_device(device)
    src = torch.zeros(BYTES, dtype=torch.uint8, device="cuda")
    dst = torch.zeros(BYTES, dtype=torch.uint8, device="cuda")
    keep: list[object] = [src, dst]
    if memory == "gpu_sink":  # pinned: the sink's kernels store to it, this thread polls it
        word = torch.zeros(1, dtype=torch.int64, pin_memory=True)
        keep.append(word)
        sig = word.numpy().view(np.uint64)
    torch.cuda.synchronize()
    return keep, src.data_ptr(), dst.data_ptr(), sig, device


def addr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def pingpong(rank: int, uid: bytes, mode: str, local_shm: bool,
             memory: str) -> dict[str, list[float]]:  # fmt: skip
    """One rank's part; returns, per repeat, the one-way latency ("latency") and the time per
    put_signal in bursts ("burst"), in microseconds."""
    from gshmem import _C

    keep, src_addr, dst_addr, sig, device = buffers(rank, memory)
    bs = _C.BootstrapHandle(uid, rank, 2, 60.0)
    sink_device = device if memory == "gpu_sink" else None
    eng = _C.NetEngine(bs, local_shm=local_shm, gpu_sink_device=sink_device)
    data = eng.register(dst_addr, BYTES)
    signals = eng.register(addr(sig), sig.nbytes)
    # the proxy thread works on the data's GPU, as a comm's does
    prox = _C.TestProxy(eng, 1024, 1, device=device) if mode == "proxies" else None
    op = _C.PROXY_OPS["put_inline_signal" if PUT == "inline" else "put_signal"]
    peer = 1 - rank

    def send() -> None:
        if prox is not None:
            while not prox.try_push(op, peer, data, src_addr, 0, BYTES, signals, 0, 1):
                pass
        elif PUT == "inline":
            eng.put_inline(peer, src_addr, BYTES, data, 0, signals, 0, 1, False)
        else:
            eng.put_signal(peer, src_addr, BYTES, data, 0, signals, 0, 1)

    def wait(value: int) -> None:
        while int(sig[0]) < value:  # this side's engine (or proxy thread) adds to it
            if prox is None:
                eng.progress()
            else:
                os.sched_yield()  # the proxy threads need the cores on a small machine

    got = 0  # signals this side has seen so far

    def round_trip() -> None:
        nonlocal got
        got += 1
        if rank == 0:
            send()
            wait(got)
        else:
            wait(got)
            send()

    def burst() -> None:  # a burst, then the other side's one answer
        nonlocal got
        if rank == 0:
            for _ in range(BURST):
                send()
            got += 1
            wait(got)
        else:
            got += BURST
            wait(got)
            send()

    def timed(one: Callable[[], None], warmup: int, rounds: int, per_round: int) -> list[float]:
        """Microseconds per message (per_round messages a round) in each of REPEATS runs."""
        times = []
        for rep in range(REPEATS + 1):
            eng.barrier()
            n = warmup if rep == 0 else rounds
            start = time.perf_counter()
            for _ in range(n):
                one()
            if rep > 0:
                times.append((time.perf_counter() - start) / (n * per_round) * 1e6)
        return times

    results = {"latency": timed(round_trip, WARMUP, ITERS, 2),  # one way: half a round trip
               "burst": timed(burst, max(1, BURSTS // 10), BURSTS, BURST)}  # fmt: skip
    eng.barrier()  # before stopping: this side's last reply may still be in its queue
    if prox is not None:
        prox.stop()
    eng.close()
    del keep
    return results


def start_rank(rank: int, args: list[str], env: dict[str, str]) -> subprocess.Popen:
    cmd = [sys.executable, __file__, str(rank), *args]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)


def main() -> None:
    if len(sys.argv) == 6:  # a rank
        rank, uid, mode, local_shm, memory = sys.argv[1:]
        result = pingpong(int(rank), bytes.fromhex(uid), mode, local_shm == "1", memory)
        print(json.dumps(result), flush=True)
        return
    from gshmem import _C

    memories = os.environ.get("MEMORY", "host").split(",")
    unknown = sorted(set(memories) - set(MEMORIES))
    if unknown:
        sys.exit(f"MEMORY: unknown {unknown}; choose from {', '.join(MEMORIES)}")
    if PUT not in PUTS or BYTES < 1 or (PUT == "inline" and BYTES > INLINE_MAX):
        sys.exit(f"PUT must be one of {PUTS} and BYTES at least 1 (at most {INLINE_MAX} inline)")
    print(f"put_signal ({PUT}), {BYTES} B: one way (median of {REPEATS} x {ITERS} round trips)")
    print(f"and per message in bursts of {BURST} (median of {REPEATS} x {BURSTS} bursts), us")
    head = f"{'memory':8} {'through':8} {'transports':18} {'one way':>8} {'burst':>8}"
    print(f"{head}   runs (one way)")
    for memory in memories:
        if memory != "host" and _C.device_count() == 0:
            print(f"{memory:8} skipped: no GPU here")
            continue
        for mode in MODES:
            for label, tls, local_shm in SETTINGS:
                uid = _C.unique_id_create("127.0.0.1", 0, False).hex()
                # GPU memory over TCP: UCX copies it through its cuda_copy transport
                gpu_tls = ",cuda_copy" if memory != "host" and tls == "tcp" else ""
                env = {**os.environ, "UCX_TLS": tls + gpu_tls}
                args = [uid, mode, "1" if local_shm else "0", memory]
                procs = [start_rank(r, args, env) for r in range(2)]
                outs = [p.communicate(timeout=300)[0] for p in procs]
                row = f"{memory:8} {mode:8} {label:18}"
                if any(p.returncode != 0 for p in procs):
                    print(f"{row} failed (exit codes {[p.returncode for p in procs]})")
                    continue
                got = json.loads(outs[0].strip().splitlines()[-1])
                lat, burst = statistics.median(got["latency"]), statistics.median(got["burst"])
                runs = ", ".join(f"{x:.1f}" for x in got["latency"])
                print(f"{row} {lat:8.1f} {burst:8.2f}   {runs}")


if __name__ == "__main__":
    main()
