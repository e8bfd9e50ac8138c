"""Chunked copy-engine puts: what each chunk of the staged JAX ppermute costs on its stream.

The experiment behind gshmem.jax's direct ppermute (docs/jax.md, "Large ppermutes"): two GPUs
driven by one process each put 256 MiB to the other at once, on the copy engines, as
  put                    the bytes in chunks, back to back
  put_signal             each chunk followed by its arrival signal (a stream memory operation)
  wait_reset_put_signal  as the staged sender does per chunk: wait for the receiver's "free"
                         flag (already set here), reset it, put, signal
for 1, 4, 8 and 16 chunks. Prints the slower GPU's time (CUDA events), median of 7. Run on a
host with two NV-linked GPUs:

    python benchmarks/chunked_puts.py
"""

from __future__ import annotations

import statistics

import torch

import gshmem

MIB = 1 << 20
TOTAL = 256 * MIB
VARIANTS = ("put", "put_signal", "wait_reset_put_signal")


def main() -> None:
    comms = gshmem.init_local([0, 1])
    slots = gshmem.for_each(comms, lambda c: c.empty(TOTAL, torch.uint8))
    flags = gshmem.for_each(comms, lambda c: c.zeros(256, torch.int64))  # [0:128) arrived
    srcs = [torch.randint(0, 255, (TOTAL,), dtype=torch.uint8, device=i) for i in range(2)]
    streams = [torch.cuda.Stream(device=i) for i in range(2)]

    def run(variant: str, chunk: int) -> float:
        for i in range(2):
            flags[i].zero_()
            flags[i][128:].fill_(1)  # the receivers' "free" flags, already set
            torch.cuda.synchronize(i)
        events = []
        for i, comm in enumerate(comms):
            st, peer = streams[i], 1 - i
            with torch.cuda.device(i):
                start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
                start.record(st)
                for k in range(TOTAL // chunk):
                    part = slice(k * chunk, (k + 1) * chunk)
                    dst, src = slots[i][part], srcs[i][part]
                    arrived, free = flags[i][k : k + 1], flags[i][128 + k : 129 + k]
                    if variant == "put":
                        comm.put(dst, src, peer, stream=st)
                        continue
                    if variant == "wait_reset_put_signal":
                        comm.signal_wait_until(free, "eq", 1, stream=st)
                        comm.signal_op(free, 0, i, stream=st)
                    comm.put_signal(dst, src, arrived, 1, peer, stream=st)
                end.record(st)
                events.append((start, end))
        for i in range(2):
            torch.cuda.synchronize(i)
        return max(a.elapsed_time(b) * 1000 for a, b in events)

    for variant in VARIANTS:
        for chunk in (256 * MIB, 64 * MIB, 32 * MIB, 16 * MIB):
            us = statistics.median(run(variant, chunk) for _ in range(7))
            print(f"{variant:22s} {TOTAL // chunk:3d} x {chunk // MIB:3d} MiB: {us:8.1f} us "
                  f"{TOTAL / us / 1e3:6.1f} GB/s", flush=True)  # fmt: skip
    gshmem.for_each(comms, lambda c: c.finalize())


if __name__ == "__main__":
    main()
