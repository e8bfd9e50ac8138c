"""What the proxy path costs on its own, without a GPU or a network: put_signal ping-pong between
two processes on this host, on host memory, 8 bytes. Two ways of driving it:

- ``proxies``: each side a host thread producing descriptors into its proxy queue, the proxy
  thread executing them on UCX (src/proxy), the signal applied by the other side's proxy thread
  (queue -> proxy thread -> UCX -> the target's proxy applies the signal -> the target's host
  thread sees it);
- ``engine``: each side's thread calls the network engine itself and progresses it while it
  waits (no proxy thread): what the engine and UCX's transports cost.

Each over three transport settings: UCX limited to TCP; UCX's own choice with the endpoints in
UCX's peer-failure mode (GSHMEM_PROXY_LOCAL_SHM=0: no shared-memory transport qualifies); and
UCX's own choice with peers on this host out of that mode (the default: shared memory).
Prints the median one-way latency (half a round trip) of 5 runs of ITERS round trips, and the
time per put_signal in bursts of BURST (one side sends BURST in a row, the other answers the
last with one of its own: how well put_signals overlap; the answer's round trip is included).
A floor for the proxy path's own overhead, not the GPU-initiated figure over InfiniBand.

    python benchmarks/proxy_pingpong.py            (needs UCX: pip install libucx-cu13)
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
# (label, UCX_TLS, the engine's local_shm)
SETTINGS = (("tcp", "tcp", True), ("all, peer-failure", "all", False), ("all", "all", True))
MODES = ("engine", "proxies")


def pingpong(rank: int, uid: bytes, mode: str, local_shm: bool) -> dict[str, list[float]]:
    """One rank's part; returns, per repeat, the one-way latency ("latency") and the time per
    put_signal in bursts ("burst"), in microseconds."""
    from gshmem import _C

    bs = _C.BootstrapHandle(uid, rank, 2, 60.0)
    eng = _C.NetEngine(bs, local_shm=local_shm)
    src = np.zeros(8, np.uint8)
    dst = np.zeros(8, np.uint8)
    sig = np.zeros(1, np.uint64)
    data = eng.register(dst.__array_interface__["data"][0], dst.nbytes)
    signals = eng.register(sig.__array_interface__["data"][0], sig.nbytes)
    prox = _C.TestProxy(eng, 1024, 1) if mode == "proxies" else None
    put_signal, peer = _C.PROXY_OPS["put_signal"], 1 - rank
    src_addr = src.__array_interface__["data"][0]

    def send() -> None:
        if prox is None:
            eng.put_signal(peer, src_addr, 8, data, 0, signals, 0, 1)
            return
        while not prox.try_push(put_signal, peer, data, src_addr, 0, 8, signals, 0, 1):
            pass

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
    return results


def start_rank(rank: int, args: list[str], env: dict[str, str]) -> subprocess.Popen:
    cmd = [sys.executable, __file__, str(rank), *args]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)


def main() -> None:
    if len(sys.argv) == 5:  # a rank
        rank, uid, mode, local_shm = sys.argv[1:]
        result = pingpong(int(rank), bytes.fromhex(uid), mode, local_shm == "1")
        print(json.dumps(result), flush=True)
        return
    from gshmem import _C

    print(f"put_signal, 8 B, host memory: one way (median of {REPEATS} x {ITERS} round trips)")
    print(f"and per message in bursts of {BURST} (median of {REPEATS} x {BURSTS} bursts), us")
    print(f"{'through':8} {'transports':18} {'one way':>8} {'burst':>8}   runs (one way)")
    for mode in MODES:
        for label, tls, local_shm in SETTINGS:
            uid = _C.unique_id_create("127.0.0.1", 0, False).hex()
            env = {**os.environ, "UCX_TLS": tls}
            args = [uid, mode, "1" if local_shm else "0"]
            procs = [start_rank(r, args, env) for r in range(2)]
            outs = [p.communicate(timeout=300)[0] for p in procs]
            if any(p.returncode != 0 for p in procs):
                print(f"{mode:8} {label:18} failed (exit codes {[p.returncode for p in procs]})")
                continue
            got = json.loads(outs[0].strip().splitlines()[-1])
            lat, burst = statistics.median(got["latency"]), statistics.median(got["burst"])
            runs = ", ".join(f"{x:.1f}" for x in got["latency"])
            print(f"{mode:8} {label:18} {lat:8.1f} {burst:8.2f}   {runs}")


if __name__ == "__main__":
    main()
