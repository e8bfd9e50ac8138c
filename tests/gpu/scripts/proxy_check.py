"""GPU checks of the proxy path, run as one rank of
``GSHMEM_TRANSPORT=proxy python -m gshmem.run -n N proxy_check.py SCENARIO``.

Every step is bounded: the host polls with deadlines and reports what the proxy did (descriptors
taken and retired, whether its thread failed) instead of hanging when something is lost.

  basic   one block puts 4 KiB with a signal ADD to the right neighbour and waits for it
          (put_signal); the host waits for the signal with a deadline and checks the data, then
          a get back
  nbi     the same put with signal from a kernel that does not wait for it (put_signal_nbi, no
          quiet): the host alone waits
  stream  basic's blocking kernels, on a non-blocking stream
  sizes   basic's put_signal at 1 B .. 32 MiB, one size after another, each timed and checked
  sizes_nbi  the same with nbi's kernels (no kernel runs while the network moves the data)
  coll    a collective over PEs beyond load/store reach without NCCL enabled: a usage error
          saying to enable NCCL, before anything is enqueued; the comm keeps working (basic)
Prints "PASS <scenario>" on success; any failure raises (non-zero exit).
"""

from __future__ import annotations

import ctypes
import faulthandler
import functools
import time

import cupy as cp
import numpy as np
import torch
from device_api_check import POISON, cuda_include, random_bytes, run_scenarios, sync
from expect import expect_usage

import gshmem
from gshmem.device import device_handle

DEADLINE_S = 20.0

# Small kernels of their own, so a run does not wait for device_api_test.cu to compile.
KERNELS = r"""
#include <gshmem/device.cuh>
using gshmem::Block;
extern "C" __global__ void put_signal_block(gshmem::Device dev, char* dst, const char* src,
                                            size_t bytes, uint64_t* sig, int pe) {
  gshmem::put_signal<Block>(dev, dst, src, bytes, sig, 1, gshmem::SignalOp::Add, pe);
}
extern "C" __global__ void put_signal_nbi_thread(gshmem::Device dev, char* dst, const char* src,
                                                 size_t bytes, uint64_t* sig, int pe) {
  gshmem::put_signal_nbi<gshmem::Thread>(dev, dst, src, bytes, sig, 1, gshmem::SignalOp::Add, pe);
}
extern "C" __global__ void get_block(gshmem::Device dev, char* dst, const char* src, size_t bytes,
                                     int pe) {
  gshmem::get<Block>(dev, dst, src, bytes, pe);
}
"""


@functools.cache
def kernel(name: str) -> cp.RawKernel:
    inc = gshmem.include_dir()
    module = cp.RawModule(code=KERNELS, options=(f"-I{inc}", *cuda_include(), "-std=c++17"))
    return module.get_function(name)


def proxy_state(comm: gshmem.Comm) -> str:
    s = device_handle(comm).struct
    if s.proxy_capacity == 0:
        return "no proxy path"
    word = lambda addr: ctypes.c_uint64.from_address(addr).value  # noqa: E731 (mapped host memory)
    return (f"proxy: head {word(s.proxy_head)} retired {word(s.proxy_retired)} "
            f"failed {word(s.proxy_failed)}")  # fmt: skip


def wait_value(comm: gshmem.Comm, t: torch.Tensor, want: int, what: str) -> float:
    start = time.monotonic()
    while int(t.item()) < want:
        if time.monotonic() - start > DEADLINE_S:
            comm.check()
            raise AssertionError(f"{what}: {int(t.item())} after {DEADLINE_S} s, want {want}; "
                                 f"{proxy_state(comm)}")  # fmt: skip
        time.sleep(0.001)
    return time.monotonic() - start


def scenario_basic(comm: gshmem.Comm, dev: np.ndarray, nbi: bool = False, size: int = 4096) -> None:
    n, me = comm.nranks, comm.rank
    right, left = (me + 1) % n, (me - 1) % n
    src = comm.empty((size,), torch.uint8)
    dst = comm.empty((size,), torch.uint8)
    sig = comm.zeros((1,), torch.int64)
    src.copy_(random_bytes(me, size, comm.device))
    dst.fill_(POISON)
    sync(comm)
    print(f"rank {me}: before: {proxy_state(comm)}", flush=True)
    args = (dev, dst.data_ptr(), src.data_ptr(), np.uint64(size), sig.data_ptr(), np.int32(right))
    kernel("put_signal_nbi_thread" if nbi else "put_signal_block")((1,), (1 if nbi else 32,), args)
    torch.cuda.synchronize(comm.device)  # the put's quiet is bounded by GSHMEM_TIMEOUT
    comm.check()
    print(f"rank {me}: put_signal returned: {proxy_state(comm)}", flush=True)
    took = wait_value(comm, sig, 1, "signal from the left")
    print(f"rank {me}: signal after {took * 1e3:.2f} ms", flush=True)
    want = random_bytes(left, size, comm.device)
    if not torch.equal(dst, want):
        raise AssertionError(f"data from the left wrong in {int((dst != want).sum())} bytes")
    sync(comm)
    back = comm.empty((size,), torch.uint8)
    back.fill_(POISON)
    sync(comm)
    args = (dev, back.data_ptr(), dst.data_ptr(), np.uint64(size), np.int32(right))
    kernel("get_block")((1,), (32,), args)
    torch.cuda.synchronize(comm.device)
    comm.check()
    if not torch.equal(back, random_bytes(me, size, comm.device)):
        raise AssertionError("get from the right neighbour wrong")
    for t in (back, sig, dst, src):
        comm.free(t)


def scenario_nbi(comm: gshmem.Comm, dev: np.ndarray) -> None:
    scenario_basic(comm, dev, nbi=True)


def scenario_sizes(comm: gshmem.Comm, dev: np.ndarray, nbi: bool = False) -> None:
    for size in (1, 8, 255, 4096, 65537, 1 << 20, (8 << 20) + 3, 32 << 20):
        start = time.monotonic()
        scenario_basic(comm, dev, nbi=nbi, size=size)
        print(f"rank {comm.rank}: size {size} done in {time.monotonic() - start:.3f} s", flush=True)


def scenario_sizes_nbi(comm: gshmem.Comm, dev: np.ndarray) -> None:
    scenario_sizes(comm, dev, nbi=True)


def scenario_stream(comm: gshmem.Comm, dev: np.ndarray) -> None:
    with cp.cuda.Stream(non_blocking=True):
        scenario_basic(comm, dev)


def scenario_coll(comm: gshmem.Comm, dev: np.ndarray) -> None:
    # a collective the proxy cannot run (an all_gather into an ordinary tensor) is refused before
    # anything is enqueued, and the comm works on
    x = comm.zeros((1024,), torch.float32)
    expect_usage(lambda: comm.all_gather(x[: 1024 // comm.nranks]), "beyond load/store reach",
                 "enable_nccl")  # fmt: skip
    comm.free(x)
    scenario_basic(comm, dev)


def main() -> None:
    # a step stuck where no deadline reaches (a CUDA call) still ends, showing where it was
    faulthandler.dump_traceback_later(3 * DEADLINE_S, exit=True)
    run_scenarios(globals(), lambda: kernel("get_block"))


if __name__ == "__main__":
    main()
