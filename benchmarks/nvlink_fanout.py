"""NVLink fan-out: how fast each PE moves a block to every other PE at once, by schedule.

The experiment behind the push order of gshmem's collectives (docs/results.md, "Collectives"):
every PE runs one kernel that moves its `blk` bytes to all n - 1 peers at the same time, as
  push                every CTA stores its share to each peer in turn (all start at the same peer)
  push-1peer-per-cta  each CTA stores to one peer only (CTAs split evenly among peers)
  pull                every CTA loads its share from each peer in turn
  local               the same bytes copied n - 1 times within the GPU (for scale)
Prints GB/s per PE ((n - 1) x blk / time, 10 back-to-back launches, CUDA events; launch cost
dominates below ~4 MiB). Run on a GPU host:

    python -m gshmem.run -n 4 benchmarks/nvlink_fanout.py
"""

from __future__ import annotations

import cupy as cp
import numpy as np
import torch

import gshmem
from gshmem.device import device_handle

KERNEL = r"""
#include <gshmem/device.cuh>
using namespace gshmem;
// mode 0: CTA b pushes its range to every peer in turn; 1: CTA b serves one peer only;
// 2: CTA b pulls (get) its range from every peer in turn; 3: local copies of the same bytes.
extern "C" __global__ void __launch_bounds__(1024)
    fan(Device dev, char* dst, const char* src, size_t blk, int mode) {
  const int n = dev.n_pes, me = dev.my_pe;
  if (mode == 1) {
    const int per = gridDim.x / (n - 1);
    const int k = blockIdx.x / per, b = blockIdx.x % per;
    const int q = (me + 1 + k) % n;
    const size_t chunk = (blk / per + 15) / 16 * 16, lo = b * chunk;
    const size_t hi = min(blk, lo + chunk);
    if (lo < hi) put<Block>(dev, dst + me * blk + lo, src + lo, hi - lo, q);
    return;
  }
  const size_t chunk = (blk / gridDim.x + 15) / 16 * 16, lo = blockIdx.x * chunk;
  const size_t hi = min(blk, lo + chunk);
  if (lo >= hi) return;
  for (int k = 1; k < n; ++k) {
    const int q = (me + k) % n;
    if (mode == 0) {
      put<Block>(dev, dst + me * blk + lo, src + lo, hi - lo, q);
    } else if (mode == 2) {
      get<Block>(dev, dst + q * blk + lo, src + lo, hi - lo, q);
    } else {
      detail::copy<Block>(dst + q * blk + lo, src + lo, hi - lo);
    }
  }
}
"""
MODES = ((0, "push"), (1, "push-1peer-per-cta"), (2, "pull"), (3, "local"))
ITERS = 10


def main() -> None:
    comm = gshmem.init()
    cp.cuda.Device(comm.device).use()
    fan = cp.RawModule(code=KERNEL, options=(f"-I{gshmem.include_dir()}", "-std=c++17"))
    fan = fan.get_function("fan")
    dev = device_handle(comm).numpy()
    n = comm.nranks
    for blk_mib in (1, 4, 16):
        blk = blk_mib << 20
        src = comm.empty((blk,), torch.uint8)
        src.random_(0, 255)
        dst = comm.empty((n * blk,), torch.uint8)
        ptrs = (np.uint64(dst.data_ptr()), np.uint64(src.data_ptr()), np.uint64(blk))
        for mode, name in MODES:
            for ctas in (16, 32, 64, 128):
                if mode == 1:
                    ctas = ctas // (n - 1) * (n - 1)  # the same CTAs for every peer
                for threads in (512, 1024):
                    args = (dev, *ptrs, np.int32(mode))
                    fan((ctas,), (threads,), args)  # warm-up
                    torch.cuda.synchronize()
                    comm.barrier()
                    start = torch.cuda.Event(enable_timing=True)
                    stop = torch.cuda.Event(enable_timing=True)
                    start.record()
                    for _ in range(ITERS):
                        fan((ctas,), (threads,), args)
                    stop.record()
                    torch.cuda.synchronize()
                    us = start.elapsed_time(stop) * 1e3 / ITERS
                    comm.barrier()
                    if comm.rank == 0:
                        gbs = (n - 1) * blk / us / 1e3
                        print(
                            f"blk={blk_mib}MiB {name:20s} ctas={ctas:3d} threads={threads:4d} "
                            f"{us:8.2f} us {gbs:7.1f} GB/s per PE",
                            flush=True,
                        )
        comm.free(dst)
        comm.free(src)
    comm.finalize()


if __name__ == "__main__":
    main()
