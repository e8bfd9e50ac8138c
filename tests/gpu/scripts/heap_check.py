"""GPU checks of the symmetric heap, run as one rank of `python -m gshmem.run -n N`.

Usage: heap_check.py SCENARIO   (data | growth | mismatch | reinit | timing | local | badinit |
                                 contexts)
Prints "PASS <scenario> ..." on success; any failure raises (non-zero exit).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import torch

import gshmem

FIRST_INIT_S = 0.0
DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int64, torch.uint8]


def pattern(seed: int, shape: tuple[int, ...], dtype: torch.dtype, device: int) -> torch.Tensor:
    """Random data that any PE can regenerate from the seed (never zeros)."""
    g = torch.Generator(device=f"cuda:{device}").manual_seed(seed)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g, device=f"cuda:{device}", dtype=torch.float32).to(
            dtype
        )
    info = torch.iinfo(dtype)
    lo, hi = max(info.min, -(2**31)), min(info.max, 2**31 - 1)
    return torch.randint(lo, hi, shape, generator=g, device=f"cuda:{device}", dtype=torch.int64).to(
        dtype
    )


def poison(t: torch.Tensor) -> None:
    t.view(torch.uint8).fill_(0xA5)


def exchange_round(
    comm: gshmem.Comm, shape: tuple[int, ...], dtype: torch.dtype, salt: int
) -> None:
    """Every PE puts into its right neighbour's inbox and gets its left neighbour's data."""
    me, n = comm.rank, comm.nranks
    right, left = (me + 1) % n, (me - 1) % n
    mine = comm.empty(shape, dtype)
    inbox = comm.empty(shape, dtype)
    got = torch.empty(shape, dtype=dtype, device=f"cuda:{comm.device}")
    mine.copy_(pattern(salt * 1000 + me, shape, dtype, comm.device))
    poison(inbox)
    poison(got)
    torch.cuda.synchronize(comm.device)
    comm.barrier()
    comm.peer_tensor(inbox, right).copy_(mine)  # put
    got.copy_(comm.peer_tensor(mine, left))  # get
    torch.cuda.synchronize(comm.device)
    comm.barrier()
    expect_left = pattern(salt * 1000 + left, shape, dtype, comm.device)
    assert torch.equal(inbox, expect_left), f"put: inbox differs ({dtype}, {shape})"
    assert torch.equal(got, expect_left), f"get: data differs ({dtype}, {shape})"
    assert comm.ptr(mine.data_ptr(), me) == mine.data_ptr()
    comm.free(inbox)
    comm.free(mine)


def scenario_data(comm: gshmem.Comm) -> str:
    shapes = [(1,), (3,), (1000003,), (257, 129), (4 << 20,)]
    rounds = 0
    for salt, dtype in enumerate(DTYPES):
        for shape in shapes:
            exchange_round(comm, shape, dtype, salt * 10 + len(shape))
            rounds += 1
    # A view of a symmetric tensor maps to the same view of the peer's copy.
    t = comm.empty((64, 64), torch.float32)
    t.copy_(pattern(comm.rank, (64, 64), torch.float32, comm.device))
    torch.cuda.synchronize(comm.device)
    comm.barrier()
    peer = comm.peer_tensor(t[3:9, 5:60:3], (comm.rank + 1) % comm.nranks)
    ref = pattern((comm.rank + 1) % comm.nranks, (64, 64), torch.float32, comm.device)[3:9, 5:60:3]
    assert torch.equal(peer, ref)
    comm.barrier()
    comm.free(t)
    return f"{rounds} put/get rounds over {len(DTYPES)} dtypes"


def scenario_growth(comm: gshmem.Comm) -> str:
    first = comm.empty((8 << 20,), torch.float32)  # 32 MiB, allocated before the growth below
    first.copy_(pattern(comm.rank, first.shape, torch.float32, comm.device))
    addr = first.data_ptr()
    mapped0 = comm.heap_info()["heap_mapped"]
    blocks = [comm.empty((25 << 20,), torch.float32) for _ in range(4)]  # 4 x 100 MiB
    mapped1 = comm.heap_info()["heap_mapped"]
    assert mapped1 >= (32 << 20) + (400 << 20) > mapped0, (mapped0, mapped1)
    assert first.data_ptr() == addr
    assert torch.equal(first, pattern(comm.rank, first.shape, torch.float32, comm.device))
    # The new chunks are mapped on every peer too: exchange through the last block.
    exchange_round(comm, (100 << 18,), torch.float32, 77)
    # Same offsets on every PE: each writes its offsets into PE 0's table.
    base = comm.heap_info()["heap_base"]
    offsets = torch.tensor([b.data_ptr() - base for b in blocks], device=f"cuda:{comm.device}")
    table = comm.zeros((comm.nranks, len(blocks)), torch.int64)
    comm.peer_tensor(table, 0)[comm.rank].copy_(offsets)
    torch.cuda.synchronize(comm.device)
    comm.barrier()
    if comm.rank == 0:
        assert bool((table == table[0]).all()), f"offsets differ across PEs: {table.tolist()}"
    comm.free(blocks[1])
    again = comm.empty((25 << 20,), torch.float32)
    assert again.data_ptr() == blocks[1].data_ptr()  # first fit reuses the hole
    return (
        f"heap grew {mapped0 >> 20} -> {mapped1 >> 20} MiB; earlier data intact; offsets symmetric"
    )


def scenario_mismatch(comm: gshmem.Comm) -> str:
    size = 1 << 20 if comm.rank != 1 else 2 << 20
    try:
        comm.malloc(size)
    except gshmem.HeapError as e:
        assert "PE(s) 1" in str(e), str(e)
        return "mismatched allocation detected: " + str(e).split(";")[0]
    raise AssertionError("a mismatched allocation was not detected")


def scenario_reinit(comm: gshmem.Comm) -> str:
    comm.finalize()
    for i in range(3):
        with gshmem.init() as c:
            exchange_round(c, (12345,), torch.float32, 100 + i)
    return "init/finalize x3 with data checks"


def scenario_timing(comm: gshmem.Comm) -> str:
    cold_init = FIRST_INIT_S
    comm.finalize()
    torch.cuda.synchronize(comm.device)
    t0 = time.perf_counter()
    c = gshmem.init()
    t_init = time.perf_counter() - t0
    c.barrier()
    grow_s = []
    bufs = []
    for _ in range(4):  # each 1 GiB malloc grows the heap by 1 GiB
        t0 = time.perf_counter()
        bufs.append(c.malloc(1 << 30))
        grow_s.append(time.perf_counter() - t0)
    t_malloc, t_malloc2 = grow_s[0], grow_s[1]
    del bufs
    c.finalize()
    result = {
        "rank": comm.rank,
        "first_init_s": cold_init,
        "init_s": t_init,
        "malloc_1GiB_s": t_malloc,
        "malloc_1GiB_again_s": t_malloc2,
        "malloc_1GiB_series_s": grow_s,
    }
    print("TIMING " + json.dumps(result), flush=True)
    return (
        f"first init {cold_init * 1e3:.1f} ms, init {t_init * 1e3:.1f} ms, "
        f"1 GiB malloc {t_malloc * 1e3:.1f} ms (then {t_malloc2 * 1e3:.1f} ms)"
    )


def scenario_badinit(_: None) -> str:
    """One rank asks for a device that does not exist: every rank gets the same clear error, no
    rank leaks a descriptor, and the next init works."""
    rank = int(os.environ["GSHMEM_RANK"])
    local = rank % torch.cuda.device_count()
    torch.cuda.set_device(local)
    torch.zeros(1, device=f"cuda:{local}")  # the CUDA context (and its fds) exist before we count
    before = sorted(os.listdir("/proc/self/fd"))
    try:
        gshmem.init(device=99 if rank == 1 else local)
    except gshmem.UsageError as e:
        assert "init failed on rank 1" in str(e) and "device 99" in str(e), str(e)
    else:
        raise AssertionError("init with a bad device did not fail")
    assert sorted(os.listdir("/proc/self/fd")) == before, "a failed init left descriptors open"
    with gshmem.init() as comm:
        exchange_round(comm, (1000,), torch.float32, 5)
    return "bad device on rank 1 reported on every rank; nothing leaked; re-init works"


def _context_gpus(pid: int) -> set[tuple[int, int, int]]:
    """(PCI domain, bus, device) of every GPU on which process ``pid`` holds a context."""
    out = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid,gpu_bus_id", "--format=csv,noheader"],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout  # fmt: skip
    found = set()
    for line in out.splitlines():
        who, _, bus = (f.strip() for f in line.partition(","))
        if who == str(pid):
            domain, b, dev = bus.split(":")[0], bus.split(":")[1], bus.split(":")[2].split(".")[0]
            found.add((int(domain, 16), int(b, 16), int(dev, 16)))
    return found


def scenario_contexts(_: None) -> str:
    """A thread that never chose a device (its current device reads as 0) initializes a comm on
    another GPU and runs on-stream operations: the process must hold a context on that GPU only.
    (Restoring the caller's device with cudaSetDevice would create one on GPU 0.)"""
    rank = int(os.environ["GSHMEM_RANK"])
    local = (rank + 1) % torch.cuda.device_count()  # rank 0 too works off device 0
    comm = gshmem.init(device=local)
    exchange_round(comm, (4096,), torch.float32, 7)
    x = torch.ones(1 << 16, device=f"cuda:{local}")
    comm.all_reduce(x)
    comm.permute(x, (comm.rank + 1) % comm.nranks, (comm.rank - 1) % comm.nranks)
    torch.cuda.synchronize(local)
    comm.barrier()
    props = torch.cuda.get_device_properties(local)
    mine = (props.pci_domain_id, props.pci_bus_id, props.pci_device_id)
    held = _context_gpus(os.getpid())
    comm.barrier()
    comm.finalize()
    assert held == {mine}, f"contexts on {sorted(held)}; expected only GPU {local} at {mine}"
    return f"a context on GPU {local} only"


def scenario_local(_: gshmem.Comm | None) -> str:
    comms = gshmem.init_local()
    for salt, dtype in enumerate([torch.float32, torch.bfloat16]):
        gshmem.for_each(
            comms, lambda c, dtype=dtype, salt=salt: exchange_round(c, (777777,), dtype, salt)
        )
    gshmem.for_each(comms, lambda c: c.finalize())
    return f"one process, {len(comms)} comms (one per GPU)"


def main() -> None:
    scenario = sys.argv[1]
    if scenario in ("local", "badinit", "contexts"):
        print(f"PASS {scenario}: {globals()[f'scenario_{scenario}'](None)}", flush=True)
        return
    global FIRST_INIT_S
    torch.cuda.init()  # the CUDA context exists before the clock starts, as in any torch job
    t0 = time.perf_counter()
    comm = gshmem.init()
    FIRST_INIT_S = time.perf_counter() - t0
    msg = globals()[f"scenario_{scenario}"](comm)
    if comm.alive:
        comm.finalize()
    print(f"PASS {scenario} rank {comm.rank}/{comm.nranks} pid {os.getpid()}: {msg}", flush=True)


if __name__ == "__main__":
    main()
