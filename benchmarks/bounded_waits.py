"""What bounding the device waits costs: put_signal ping-pong with the OpenSHMEM waits (spin
forever) against the bounded ones (a deadline and an abort flag, include/gshmem/device/
deadline.cuh), alternating in one run, on any one GPU.

Two PEs live in this one process on the same GPU (gshmem.init_local([0, 0])), so their kernels
run at the same time without the time slicing that two processes sharing a GPU get; the round
trip then goes through the GPU's own memory instead of NVLink, which leaves the wait loop as
large a share of it as it can be. The kernels are the ones `python -m gshmem.bench p2p --only
latency` runs between two GPUs (rows pingpong and pingpong_bounded). Prints the median one-way
latency of 5 runs of 2000 round trips for each scope and size. Run on a GPU host:

    python benchmarks/bounded_waits.py
"""

from __future__ import annotations

import statistics

import cupy as cp
import numpy as np
import torch

import gshmem
from gshmem.bench.p2p import _module
from gshmem.device import device_handle

ITERS, WARMUP, REPEATS = 2000, 100, 5


def main() -> None:
    comms = gshmem.init_local([0, 0])
    module = _module()
    bufs = gshmem.for_each(
        comms,
        lambda c: (c.zeros((1 << 16,), torch.uint8), c.zeros((1 << 16,), torch.uint8),
                   c.zeros((1,), torch.int64)),
    )  # fmt: skip
    streams = [cp.cuda.Stream(non_blocking=True) for _ in comms]
    outs = [torch.zeros(1, dtype=torch.int64, device="cuda") for _ in comms]
    latency: dict[tuple[str, int, bool], list[float]] = {}
    for scope, block in (("thread", 1), ("block", 256)):
        for size in (8, 4096):
            for _ in range(REPEATS):
                for bounded in (False, True):
                    kernel = module.get_function(f"pingpong_{'bounded_' if bounded else ''}{scope}")
                    for _, _, sig in bufs:
                        sig.zero_()
                    torch.cuda.synchronize()
                    for r, comm in enumerate(comms):
                        dst, src, sig = bufs[r]
                        with streams[r]:
                            kernel(
                                (1,),
                                (block,),
                                (device_handle(comm).numpy(), dst.data_ptr(), src.data_ptr(),
                                 np.uint64(size), sig.data_ptr(), np.int32(WARMUP),
                                 np.int32(ITERS), np.int32(1 - r), np.int32(r == 0),
                                 outs[r].data_ptr()),
                            )  # fmt: skip
                    for s in streams:
                        s.synchronize()
                    us = outs[0].item() / 1e3 / (2 * ITERS)
                    latency.setdefault((scope, size, bounded), []).append(us)
    for comm in comms:
        comm.check()  # no bounded wait gave up
    for scope, size in sorted({(k[0], k[1]) for k in latency}):
        plain = statistics.median(latency[(scope, size, False)])
        bounded = statistics.median(latency[(scope, size, True)])
        print(f"ping-pong<{scope}> {size:5d} B: unbounded {plain:.3f} us, bounded {bounded:.3f} us "
              f"({(bounded / plain - 1) * 100:+.1f} %)")  # fmt: skip
    del bufs
    gshmem.for_each(comms, lambda c: c.finalize())


if __name__ == "__main__":
    main()
