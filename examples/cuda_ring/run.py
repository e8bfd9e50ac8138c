"""Drives the CUDA C++ example (ring.cu): python -m gshmem.run -n N run.py path/to/libring.so"""

from __future__ import annotations

import ctypes
import sys

import torch

import gshmem
from gshmem.device import device_handle

lib = ctypes.CDLL(sys.argv[1])
lib.ring_launch.argtypes = (
    [ctypes.c_char_p, ctypes.c_size_t]
    + [ctypes.c_void_p] * 2
    + [
        ctypes.c_size_t,
        ctypes.c_void_p,
        ctypes.c_void_p,
    ]
)

comm = gshmem.init()
n = 1 << 20
send = comm.empty((n,), torch.float32)
recv = comm.empty((n,), torch.float32)
arrived = comm.zeros((1,), torch.int64)
send.copy_(torch.arange(n, device=send.device, dtype=torch.float32) + 1e6 * comm.rank)
recv.fill_(float("nan"))
torch.cuda.synchronize()
comm.barrier()

state = bytes(device_handle(comm))
stream = torch.cuda.current_stream().cuda_stream
rc = lib.ring_launch(
    state, len(state), send.data_ptr(), recv.data_ptr(), n, arrived.data_ptr(), stream
)
assert rc == 0, f"launch failed: cudaError {rc}"
torch.cuda.synchronize()

left = (comm.rank - 1) % comm.nranks
expect = torch.arange(n, device=recv.device, dtype=torch.float32) + 1e6 * left
assert torch.equal(recv, expect), "ring: wrong data"
assert int(arrived) == 1
comm.finalize()
print(f"PASS ring rank {comm.rank}")
