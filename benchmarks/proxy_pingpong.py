"""What the proxy path costs on its own, without a GPU or a network: put_signal ping-pong between
two processes on this host, each side a host thread producing descriptors into its proxy queue,
the proxy thread executing them on UCX (src/proxy), the signal applied by the other side's proxy
thread. One round trip = two put_signals (8 bytes), each: queue → proxy thread → ucp_put_nbx →
fence → active message → the target's proxy applies the signal → the target's host thread sees
it. Prints the median one-way latency of 5 runs of 2000 round trips per transport UCX is allowed.
This is a floor for the proxy's own overhead, not the GPU-initiated figure over InfiniBand.

    python benchmarks/proxy_pingpong.py            (needs UCX: pip install libucx-cu13)
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

ITERS, WARMUP, REPEATS = int(os.environ.get("ITERS", 2000)), 200, 5
TRANSPORTS = ("tcp", "all")  # UCX_TLS: loopback TCP only, and UCX's own choice (shared memory)


def pingpong(rank: int, uid: bytes) -> list[float]:
    """One rank's part; returns the one-way latency of each repeat in microseconds."""
    from gshmem import _C

    bs = _C.BootstrapHandle(uid, rank, 2, 60.0)
    eng = _C.NetEngine(bs)
    src = np.zeros(8, np.uint8)
    dst = np.zeros(8, np.uint8)
    sig = np.zeros(1, np.uint64)
    data = eng.register(dst.__array_interface__["data"][0], dst.nbytes)
    signals = eng.register(sig.__array_interface__["data"][0], sig.nbytes)
    prox = _C.TestProxy(eng, 1024, 1)
    put_signal, peer = _C.PROXY_OPS["put_signal"], 1 - rank
    src_addr = src.__array_interface__["data"][0]
    sent = 0

    def send() -> None:
        nonlocal sent
        while not prox.try_push(put_signal, peer, data, src_addr, 0, 8, signals, 0, 1):
            pass
        sent += 1

    def wait(value: int) -> None:
        while int(sig[0]) < value:  # the proxy thread adds to it
            os.sched_yield()  # the proxy threads need the cores on a small machine

    results = []
    got = 0
    for rep in range(REPEATS + 1):
        eng.barrier()
        start = time.perf_counter()
        n = WARMUP if rep == 0 else ITERS
        for _ in range(n):
            if rank == 0:
                send()
                got += 1
                wait(got)
            else:
                got += 1
                wait(got)
                send()
        elapsed = time.perf_counter() - start
        if rep > 0:
            results.append(elapsed / n / 2 * 1e6)
    eng.barrier()  # before stopping: this side's last reply may still be in its queue
    prox.stop()
    eng.close()
    return results


def main() -> None:
    if len(sys.argv) == 3:  # a rank
        print(json.dumps(pingpong(int(sys.argv[1]), bytes.fromhex(sys.argv[2]))), flush=True)
        return
    from gshmem import _C

    print("transport  one-way put_signal through both proxies (median of 5 x 2000 round trips)")
    for tls in TRANSPORTS:
        uid = _C.unique_id_create("127.0.0.1", 0, False).hex()
        env = {**os.environ, "UCX_TLS": tls}
        procs = [subprocess.Popen([sys.executable, __file__, str(r), uid], env=env,
                                  stdout=subprocess.PIPE, text=True) for r in range(2)]  # fmt: skip
        outs = [p.communicate(timeout=300)[0] for p in procs]
        if any(p.returncode != 0 for p in procs):
            print(f"{tls:9}  failed (exit codes {[p.returncode for p in procs]})")
            continue
        lat = json.loads(outs[0].strip().splitlines()[-1])
        runs = ", ".join(f"{x:.1f}" for x in lat)
        print(f"{tls:9}  {statistics.median(lat):7.1f} us   (runs: {runs})")


if __name__ == "__main__":
    main()
