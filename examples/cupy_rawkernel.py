"""The device API from NVRTC through CuPy's RawModule: each PE put_signals a random vector to its
right neighbour at warp scope and checks what its left neighbour sent.

    python -m gshmem.run -n 2 examples/cupy_rawkernel.py
"""

from __future__ import annotations

import cupy as cp
import numpy as np
import torch

import gshmem
from gshmem.device import device_handle

SOURCE = r"""
#include <gshmem/device.cuh>

extern "C" __global__ void send_right(gshmem::Device dev, const float* src, float* dst,
                                      size_t n, uint64_t* sig) {
  const int right = (gshmem::my_pe(dev) + 1) % gshmem::n_pes(dev);
  if (threadIdx.x < 32) {  // one warp moves the data and signals
    gshmem::put_signal<gshmem::Warp>(dev, dst, src, n * sizeof(float), sig, 1,
                                      gshmem::SignalOp::Set, right);
  }
  const int left = (gshmem::my_pe(dev) + gshmem::n_pes(dev) - 1) % gshmem::n_pes(dev);
  gshmem::signal_wait_until<gshmem::Block>(dev, sig, gshmem::Cmp::EQ, 1, left);  // bounded
}
"""

comm = gshmem.init()
cp.cuda.Device(comm.device).use()
module = cp.RawModule(code=SOURCE, options=(f"-I{gshmem.include_dir()}", "-std=c++17"))
send_right = module.get_function("send_right")

n = 100_003
src = comm.empty((n,), torch.float32)
dst = comm.empty((n,), torch.float32)
sig = comm.zeros((1,), torch.int64)
g = torch.Generator(device=src.device).manual_seed(comm.rank)
src.copy_(torch.randn(n, generator=g, device=src.device))
dst.fill_(float("nan"))
torch.cuda.synchronize()
comm.barrier()

send_right(
    (1,),
    (256,),
    (device_handle(comm).numpy(), src.data_ptr(), dst.data_ptr(), np.uint64(n), sig.data_ptr()),
)
cp.cuda.Device().synchronize()
comm.check()  # raises gshmem.FaultError if the bounded wait gave up (a dead or absent peer)

left = (comm.rank - 1) % comm.nranks
g = torch.Generator(device=src.device).manual_seed(left)
assert torch.equal(dst, torch.randn(n, generator=g, device=src.device)), "wrong data"
comm.barrier()
comm.finalize()
print(f"PASS cupy rank {comm.rank}")
