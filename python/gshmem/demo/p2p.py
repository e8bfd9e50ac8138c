"""The point-to-point demo (``python -m gshmem.demo p2p``): every PE puts random data into its
right neighbour's symmetric tensor, gets its left neighbour's, checks both, and says what it did.
"""

from __future__ import annotations

import time

import gshmem

ELEMENTS = 16 << 20  # 64 MiB of float32 per tensor


def worker() -> int:
    import torch

    t0 = time.perf_counter()
    comm = gshmem.init()
    init_ms = (time.perf_counter() - t0) * 1e3
    me, n = comm.rank, comm.nranks
    right, left = (me + 1) % n, (me - 1) % n
    dev = torch.device("cuda", comm.device)

    def data_of(pe: int) -> torch.Tensor:
        g = torch.Generator(device=dev).manual_seed(1234 + pe)
        return torch.randn(ELEMENTS, generator=g, device=dev)

    mine = comm.empty(ELEMENTS, torch.float32)
    inbox = comm.empty(ELEMENTS, torch.float32)
    mine.copy_(data_of(me))
    inbox.fill_(float("nan"))  # poison: unwritten elements cannot pass the check
    torch.cuda.synchronize()
    comm.barrier()

    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    comm.peer_tensor(inbox, right).copy_(mine)  # put: our SMs store into the neighbour's GPU
    stop.record()
    torch.cuda.synchronize()
    comm.barrier()  # everyone's put is complete before anyone checks
    put_ok = torch.equal(inbox, data_of(left))
    got = comm.peer_tensor(mine, left).clone()  # get: read the left neighbour's copy
    get_ok = torch.equal(got, data_of(left))

    mib = ELEMENTS * 4 >> 20
    gbps = ELEMENTS * 4 / (start.elapsed_time(stop) * 1e-3) / 1e9
    status = "verified" if put_ok and get_ok else "MISMATCH"
    print(
        f"PE {me}/{n} on GPU {comm.device} ({torch.cuda.get_device_name(dev)}): put {mib} MiB "
        f"into PE {right}'s heap ({gbps:.0f} GB/s, first touch), got {mib} MiB from PE {left}'s "
        f"heap: {status}",
        flush=True,
    )
    if me == 0:
        heap = comm.heap_info()
        print(
            f"{n} PEs, {comm.local_size} on this host; init took {init_ms:.0f} ms; heap "
            f"{heap['heap_mapped'] >> 20} MiB mapped of {heap['heap_reserved'] >> 30} GiB reserved",
            flush=True,
        )
    comm.barrier()
    comm.finalize()
    return 0 if put_ok and get_ok else 1
