"""Put + signal from Triton through the peer table (gshmem.device.peer_bases).

Every program of `put_signal` stores its block of `src` into the right neighbour's `dst` and adds
1 to the neighbour's signal with release semantics at system scope; `wait_and_copy` spins on the
local signal with acquire loads at system scope, then reads the data. A symmetric address p is
at p + (peer_bases[pe] - peer_bases[my_pe]) on PE pe; heap slots are far apart and aligned, so
that distance is a whole number of elements and plain pointer arithmetic reaches the peer.

    python -m gshmem.run -n 2 examples/triton_put_signal.py
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

import gshmem
from gshmem.device import peer_bases


@triton.jit
def put_signal(src, dst, sig, bases, my_pe, pe, n, BLOCK: tl.constexpr):
    delta = tl.load(bases + pe) - tl.load(bases + my_pe)  # bytes between the two copies
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst + delta // 4 + offs, tl.load(src + offs, mask=mask), mask=mask)
    tl.debug_barrier()  # every thread's stores precede the release below (bar.sync)
    tl.atomic_add(sig + delta // 8, 1, sem="release", scope="sys")


@triton.jit
def wait_and_copy(sig, expected, data, out, n, BLOCK: tl.constexpr):
    seen = tl.atomic_add(sig, 0, sem="acquire", scope="sys")
    while seen < expected:
        seen = tl.atomic_add(sig, 0, sem="acquire", scope="sys")
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        tl.store(out + offs, tl.load(data + offs, mask=offs < n), mask=offs < n)


comm = gshmem.init()
n, block = 1_000_003, 4096
src = comm.empty((n,), torch.float32)
dst = comm.empty((n,), torch.float32)
sig = comm.zeros((1,), torch.int64)
out = torch.full((n,), float("nan"), device=src.device)
g = torch.Generator(device=src.device).manual_seed(comm.rank)
src.copy_(torch.randn(n, generator=g, device=src.device))
dst.fill_(float("nan"))
bases = peer_bases(comm)
torch.cuda.synchronize()
comm.barrier()

right, left = (comm.rank + 1) % comm.nranks, (comm.rank - 1) % comm.nranks
programs = triton.cdiv(n, block)
put_signal[(programs,)](src, dst, sig, bases, comm.rank, right, n, BLOCK=block)
wait_and_copy[(1,)](sig, programs, dst, out, n, BLOCK=block)
torch.cuda.synchronize()

g = torch.Generator(device=src.device).manual_seed(left)
assert torch.equal(out, torch.randn(n, generator=g, device=src.device)), "wrong data"
comm.barrier()
comm.finalize()
print(f"PASS triton rank {comm.rank}")
