"""GPU checks of the device API, run as one rank of `python -m gshmem.run -n N`.

Usage: device_api_check.py SCENARIO
  rma     put/get/put_nbi/get_nbi at thread, warp and block scope: 1 B .. 32 MiB, odd sizes,
          every relative alignment, random data, poisoned destinations and guard bytes
  signal  put_signal(_nbi) SET/ADD at every scope, receiver waits then reads (signal_wait_until)
  pg      p/g on 1-, 2-, 4-, 8-byte integers, float, double
  strided iput/iget on int and double at every scope, several strides
  amo     every atomic on int32/uint32/int64/uint64 from every thread of every PE, exact totals;
          float/double add, set, fetch
  order   data-before-signal ping-pong, thousands of rounds, several sizes
  wait    wait_until(_all/_any/_some), test(_all/_any/_some), signal_fetch
  barrier team barrier/sync in loops at every scope: world, split_strided, split_2d teams
  ptr     ptr/team_ptr, team arithmetic on the device, the DeviceHandle fields
  bw      put/get bandwidth at 32 MiB (printed, not checked)
Prints "PASS <scenario>" on success; any failure raises (non-zero exit).

The kernels (tests/gpu/kernels/device_api_test.cu) are compiled once per process by CuPy's
RawModule (NVRTC); the option -DGSHMEM_HEADERS=<digest> keys CuPy's cache on the headers too.
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
from pathlib import Path

import cupy as cp
import numpy as np
import torch

import gshmem
from gshmem.device import device_handle
from gshmem.team import Team

KERNELS = Path(__file__).resolve().parents[1] / "kernels" / "device_api_test.cu"
SCOPES = {"thread": (64, 128), "warp": (16, 256), "block": (8, 512)}  # grid, block
POISON = 0xA5

# GSHMEM_TEST_SMALL=1: small sizes and few rounds, for runs under compute-sanitizer.
SMALL = os.environ.get("GSHMEM_TEST_SMALL") == "1"


@functools.cache
def module() -> cp.RawModule:
    inc = Path(gshmem.include_dir())
    digest = hashlib.sha256()
    for h in sorted((inc / "gshmem").rglob("*")):
        if h.is_file():
            digest.update(h.read_bytes())
    return cp.RawModule(
        code=KERNELS.read_text(),
        options=(f"-I{inc}", "-std=c++17", f"-DGSHMEM_HEADERS={digest.hexdigest()[:16]}"),
    )


def kernel(name: str):
    return module().get_function(name)


def sync(comm: gshmem.Comm) -> None:
    """Every PE's GPU work so far is done (device sync, then host barrier)."""
    cp.cuda.Device(comm.device).synchronize()
    torch.cuda.synchronize(comm.device)
    comm.barrier()


def random_bytes(seed: int, n: int, device: int) -> torch.Tensor:
    g = torch.Generator(device=f"cuda:{device}").manual_seed(seed)
    return torch.randint(0, 256, (n,), generator=g, device=f"cuda:{device}", dtype=torch.uint8)


def check(cond: bool, what: str) -> None:
    if not cond:
        raise AssertionError(what)


# ---------------------------------------------------------------------------------------------
def scenario_rma(comm: gshmem.Comm, dev: np.ndarray) -> None:
    n, me = comm.nranks, comm.rank
    right, left = (me + 1) % n, (me - 1) % n
    small = [1, 2, 3, 7, 15, 16, 17, 31, 33, 64, 100, 255, 257, 4099, 65541]
    large = [] if SMALL else [(1 << 20) + 7, (3 << 20) + 1, (32 << 20) + 13]
    # (dst offset, src offset): congruent mod 16 (16-byte words, with and without heads), mod 8,
    # mod 4, mod 2, and not congruent at all.
    offsets = [(0, 0), (5, 5), (8, 0), (4, 12), (6, 0), (3, 0)]
    cap = max(small + large) + 64
    src = comm.empty((cap,), torch.uint8)
    dst = comm.empty((cap,), torch.uint8)
    case = 0
    for op in ("put", "get"):
        for scope, (grid, block) in SCOPES.items():
            fn = kernel(f"{op}_{scope}")
            for mode in (0, 1):
                for size in small + large:
                    for doff, soff in offsets if size < (1 << 20) else [(0, 0), (5, 5), (3, 0)]:
                        case += 1
                        seed = case * 1000
                        src[soff : soff + size] = random_bytes(seed + me, size, comm.device)
                        dst.fill_(POISON)
                        sync(comm)
                        # put: my src -> right's dst. get: right's src -> my dst.
                        fn(
                            (grid,),
                            (block,),
                            (
                                dev,
                                dst.data_ptr() + doff,
                                src.data_ptr() + soff,
                                np.uint64(size),
                                np.int32(right),
                                np.int32(mode),
                            ),
                        )
                        sync(comm)
                        owner = left if op == "put" else right
                        want = random_bytes(seed + owner, size, comm.device)
                        got = dst[doff : doff + size]
                        what = f"{op}<{scope}> mode {mode} size {size} offsets {doff},{soff}"
                        check(torch.equal(got, want), f"{what}: wrong data")
                        check(bool((dst[:doff] == POISON).all()), f"{what}: wrote before dst")
                        tail = dst[doff + size : doff + size + 64]
                        check(bool((tail == POISON).all()), f"{what}: wrote past the end")
    comm.free(dst)
    comm.free(src)


def scenario_signal(comm: gshmem.Comm, dev: np.ndarray) -> None:
    n, me = comm.nranks, comm.rank
    right, left = (me + 1) % n, (me - 1) % n
    sizes = [1, 13, 4096, 65537] + ([] if SMALL else [(8 << 20) + 3])
    cap = max(sizes) + 32
    src = comm.empty((cap,), torch.uint8)
    dst = comm.empty((cap,), torch.uint8)
    out = torch.empty((cap,), dtype=torch.uint8, device=f"cuda:{comm.device}")
    cases = [
        (s, op, mode, size) for s in SCOPES for op in (0, 1) for mode in (0, 1) for size in sizes
    ]
    sigs = comm.zeros((len(cases),), torch.int64)
    for i, (scope, op, mode, size) in enumerate(cases):
        grid, block = SCOPES[scope]
        units = grid * block // {"thread": 1, "warp": 32, "block": block}[scope]
        if op == 0:  # SET: one unit, so the value is known
            grid, block, units = 1, {"thread": 1, "warp": 32, "block": 512}[scope], 1
        value = 1000 + i if op == 0 else 1
        src[1 : 1 + size] = random_bytes(i * 7 + me, size, comm.device)
        dst.fill_(POISON)
        out.fill_(POISON)
        sync(comm)
        sig = sigs.data_ptr() + 8 * i
        kernel(f"put_signal_{scope}")(
            (grid,),
            (block,),
            (
                dev,
                dst.data_ptr() + 1,
                src.data_ptr() + 1,
                np.uint64(size),
                sig,
                np.uint64(value),
                np.int32(op),
                np.int32(right),
                np.int32(mode),
            ),
        )
        expect = value if op == 0 else units
        kernel(f"wait_copy_{scope}")(
            (1,),
            (512,),
            (sig, np.uint64(expect), dst.data_ptr() + 1, out.data_ptr(), np.uint64(size)),
        )
        sync(comm)
        what = f"put_signal<{scope}> op {op} mode {mode} size {size}"
        check(torch.equal(out[:size], random_bytes(i * 7 + left, size, comm.device)), what)
        check(int(sigs[i]) == expect, f"{what}: signal {int(sigs[i])} != {expect}")
    for t in (sigs, dst, src):
        comm.free(t)


def scenario_pg(comm: gshmem.Comm, dev: np.ndarray) -> None:
    n, me = comm.nranks, comm.rank
    right, left = (me + 1) % n, (me - 1) % n
    count = 1001
    for name, dtype in [
        ("u8", torch.uint8),
        ("u16", torch.int16),
        ("u32", torch.int32),
        ("u64", torch.int64),
        ("f32", torch.float32),
        ("f64", torch.float64),
    ]:
        size = torch.empty((), dtype=dtype).element_size()
        values = comm.empty((count,), dtype)
        dst = comm.empty((count,), dtype)
        values.view(torch.uint8).copy_(random_bytes(me + 17 * size, count * size, comm.device))
        dst.view(torch.uint8).fill_(POISON)
        sync(comm)
        kernel(f"p_{name}")(
            (4,),
            (128,),
            (dev, dst.data_ptr(), values.data_ptr(), np.uint64(count), np.int32(right)),
        )
        sync(comm)
        want = random_bytes(left + 17 * size, count * size, comm.device)
        check(torch.equal(dst.view(torch.uint8), want), f"p<{name}>")
        got = torch.empty_like(values)
        kernel(f"g_{name}")(
            (4,),
            (128,),
            (dev, got.data_ptr(), values.data_ptr(), np.uint64(count), np.int32(right)),
        )
        sync(comm)
        want = random_bytes(right + 17 * size, count * size, comm.device)
        check(torch.equal(got.view(torch.uint8), want), f"g<{name}>")
        comm.free(dst)
        comm.free(values)


def scenario_strided(comm: gshmem.Comm, dev: np.ndarray) -> None:
    n, me = comm.nranks, comm.rank
    right, left = (me + 1) % n, (me - 1) % n
    case = 0
    for bits, dtype in ((32, torch.int32), (64, torch.float64)):
        for scope, (grid, block) in SCOPES.items():
            for nelems in (1, 33, 1000, 100003):
                for dst_stride, src_stride in ((1, 1), (3, 2), (2, 5)):
                    for get in (0, 1):
                        case += 1
                        span = nelems * max(dst_stride, src_stride) + 8
                        src = comm.empty((span,), dtype)
                        dst = comm.empty((span,), dtype)
                        esize = src.element_size()
                        src.view(torch.uint8).copy_(
                            random_bytes(case * 10 + me, span * esize, comm.device)
                        )
                        dst.view(torch.uint8).fill_(POISON)
                        poison = dst.clone()
                        sync(comm)
                        kernel(f"iput{bits}_{scope}")(
                            (grid,),
                            (block,),
                            (
                                dev,
                                dst.data_ptr(),
                                src.data_ptr(),
                                np.int64(dst_stride),
                                np.int64(src_stride),
                                np.uint64(nelems),
                                np.int32(right),
                                np.int32(get),
                            ),
                        )
                        sync(comm)
                        owner = right if get else left
                        theirs = torch.empty_like(src)
                        theirs.view(torch.uint8).copy_(
                            random_bytes(case * 10 + owner, span * esize, comm.device)
                        )
                        want = poison.clone()
                        want[: nelems * dst_stride : dst_stride] = theirs[
                            : nelems * src_stride : src_stride
                        ]
                        what = (
                            f"{'iget' if get else 'iput'}{bits}<{scope}> n {nelems} "
                            f"strides {dst_stride},{src_stride}"
                        )
                        check(torch.equal(dst.view(torch.uint8), want.view(torch.uint8)), what)
                        comm.free(dst)
                        comm.free(src)


def scenario_amo(comm: gshmem.Comm, dev: np.ndarray) -> None:
    n, me = comm.nranks, comm.rank
    grid, block, iters = 8, 128, 3
    nthreads = grid * block
    total = n * nthreads * iters  # updates each PE's cell receives
    for name, dtype, np_dtype in [
        ("i32", torch.int32, np.int32),
        ("u32", torch.int32, np.uint32),
        ("i64", torch.int64, np.int64),
        ("u64", torch.int64, np.uint64),
    ]:
        cells = comm.zeros((9,), dtype)
        cells[7] = -1  # all ones
        fetched = comm.empty((n * iters * nthreads * 3,), dtype)
        sync(comm)
        kernel(f"amo_{name}")(
            (grid,), (block,), (dev, cells.data_ptr(), fetched.data_ptr(), np.int32(iters))
        )
        sync(comm)
        mine = cells.cpu().numpy().view(np_dtype)
        ones = np.array(-1).astype(np_dtype)
        xor_one = functools.reduce(lambda a, b: a ^ b, range(1, nthreads + 1))
        xor_all = xor_one if (n * iters) % 2 else 0
        for k, what in enumerate(["add", "fetch_add", "inc", "fetch_inc", "compare_swap"]):
            check(int(mine[k]) == total, f"atomic {what}<{name}>: {int(mine[k])} != {total}")
        check(mine[5] == ones, f"atomic or<{name}>: {mine[5]:x}")
        check(int(mine[6]) == xor_all, f"atomic xor<{name}>: {int(mine[6])} != {xor_all}")
        check(int(mine[7]) == 0, f"atomic and<{name}>: {int(mine[7])}")
        # What every PE's threads fetched from my cells: fetch_add and fetch_inc saw each value
        # 0 .. total-1 exactly once; swap's old values plus the final value are the initial 0 and
        # every value swapped in.
        seen = []
        for q in range(n):
            view = comm.peer_tensor(fetched, q).cpu().numpy().view(np_dtype)
            seen.append(view.reshape(n, iters, nthreads, 3)[me].reshape(-1, 3))
        seen = np.concatenate(seen).astype(np.int64)
        for k, what in ((0, "fetch_add"), (1, "fetch_inc")):
            check(
                np.array_equal(np.sort(seen[:, k]), np.arange(total)),
                f"atomic {what}<{name}>: fetched values are not 0..{total - 1}",
            )
        swapped = np.sort(np.append(seen[:, 2], int(mine[8])))
        expected = np.sort(np.append(np.tile(np.arange(1, nthreads + 1), n * iters), 0))
        check(np.array_equal(swapped, expected), f"atomic swap<{name}>: values lost or duplicated")
        sync(comm)
        comm.free(fetched)
        comm.free(cells)
    for name, dtype in (("f32", torch.float32), ("f64", torch.float64)):
        cells = comm.zeros((4,), dtype)
        sync(comm)
        kernel(f"famo_{name}")((grid,), (block,), (dev, cells.data_ptr(), np.int32(iters)))
        sync(comm)
        got = cells.cpu().tolist()
        check(got[0] == total and got[1] == total * 0.5, f"atomic float add<{name}>: {got}")
        check(got[2] == (me - 1) % n + 0.25 and got[3] == me + 0.25, f"set/fetch<{name}>: {got}")
        comm.free(cells)


def scenario_order(comm: gshmem.Comm, dev: np.ndarray) -> None:
    n, me = comm.nranks, comm.rank
    iters = 100 if SMALL else 3000
    for words in (1, 33, 4097) if SMALL else (1, 33, 4097, 1 << 16):
        data = comm.empty((words,), torch.int64)
        staging = comm.empty((words,), torch.int64)
        for direction in (0, 1):
            sig = comm.zeros((1,), torch.int64)
            ack = comm.zeros((1,), torch.int64)
            errors = torch.zeros((1,), dtype=torch.int64, device=f"cuda:{comm.device}")
            pair = me - me % 2
            sender, receiver = (pair, pair + 1) if direction == 0 else (pair + 1, pair)
            if receiver >= n:  # odd PE count: the last PE sits out
                sender = receiver = -1
            sync(comm)
            rounds = iters if words < (1 << 16) else iters // 10
            kernel("ping_pong")(
                (1,),
                (512,),
                (
                    dev,
                    data.data_ptr(),
                    staging.data_ptr(),
                    sig.data_ptr(),
                    ack.data_ptr(),
                    np.uint64(words),
                    np.int32(rounds),
                    np.int32(sender),
                    np.int32(receiver),
                    errors.data_ptr(),
                ),
            )
            sync(comm)
            check(int(errors) == 0, f"ping-pong {words} words: {int(errors)} stale words")
            comm.free(ack)
            comm.free(sig)
        comm.free(staging)
        comm.free(data)


def scenario_wait(comm: gshmem.Comm, dev: np.ndarray) -> None:
    n = comm.nranks
    value = 7
    for exclude in (None, 0):
        flags = comm.zeros((n,), torch.int64)
        status = torch.zeros((n,), dtype=torch.int32, device=f"cuda:{comm.device}")
        if exclude is not None:
            status[exclude] = 1
        out = torch.full((8,), -5, dtype=torch.int64, device=f"cuda:{comm.device}")
        sync(comm)
        kernel("wait_family")(
            (1,),
            (1,),
            (
                dev,
                flags.data_ptr(),
                0 if exclude is None else status.data_ptr(),
                out.data_ptr(),
                np.int64(value),
            ),
        )
        sync(comm)
        o = out.cpu().tolist()
        included = n - (exclude is not None)
        check(0 <= o[0] < n and o[0] != exclude, f"wait_until_any: {o[0]}")
        check(1 <= o[1] <= included, f"wait_until_some: {o[1]}")
        check(
            o[2] == 1 and o[3] == -1 and o[4] == 1 and o[5] == n and o[6] == value,
            f"test family: {o}",
        )
        check(flags.tolist() == [value] * n, f"flags: {flags.tolist()}")
        comm.free(flags)


def scenario_barrier(comm: gshmem.Comm, dev: np.ndarray) -> None:
    n, me = comm.nranks, comm.rank
    world = Team.world(comm)
    teams = {"world": world, "evens/odds": world.split_strided(me % 2, 2, (n - me % 2 + 1) // 2)}
    if n >= 4:
        teams["rows"], teams["columns"] = world.split_2d(2)
    iters = 50 if SMALL else 1000
    for tname, team in teams.items():
        for scope in SCOPES:
            slots = comm.zeros((2,), torch.int64)
            errors = torch.zeros((1,), dtype=torch.int64, device=f"cuda:{comm.device}")
            sync(comm)
            kernel(f"barrier_loop_{scope}")(
                (1,),
                (128,),
                (dev, team.numpy(), slots.data_ptr(), np.int32(iters), errors.data_ptr()),
            )
            sync(comm)
            check(int(errors) == 0, f"barrier<{scope}> on {tname}: {int(errors)} missed values")
            comm.free(slots)


def scenario_ptr(comm: gshmem.Comm, dev: np.ndarray) -> None:
    n, me = comm.nranks, comm.rank
    handle = device_handle(comm)
    check(handle.my_pe == me and handle.n_pes == n, f"handle {handle}")
    check(handle.world == Team(0, 1, n, me), f"world {handle.world}")
    node = Team.node(comm)
    check(node == handle.node and me in node.members(), f"node {node}")
    team = Team.world(comm).split_strided(0, 1, n)
    obj = comm.zeros((4,), torch.int64)
    out = torch.zeros((3 * n + 2,), dtype=torch.int64, device=f"cuda:{comm.device}")
    sync(comm)
    kernel("ptr_check")((1,), (1,), (dev, team.numpy(), obj.data_ptr(), out.data_ptr()))
    sync(comm)
    o = out.cpu().tolist()
    for pe in range(n):
        expect = comm.ptr(obj.data_ptr(), pe) or 0
        check(o[pe] == expect and o[n + pe] == expect, f"ptr/team_ptr to {pe}: {o}")
        check(o[2 * n + pe] == pe, f"team_world_pe: {o}")
    check(o[3 * n] == me and o[3 * n + 1] == me * 1000 + n, f"team/device ids: {o}")
    reachable = [q for q in range(n) if comm.ptr(obj.data_ptr(), q)]
    check(int(obj[0]) == sum(q + 1 for q in reachable), f"writes through ptr: {int(obj[0])}")
    comm.free(obj)


def scenario_bw(comm: gshmem.Comm, dev: np.ndarray) -> None:
    n, me = comm.nranks, comm.rank
    size, rotate, iters = 32 << 20, 4, 20
    bufs = [comm.empty((size,), torch.uint8) for _ in range(2 * rotate)]
    for b in bufs:
        b.copy_(random_bytes(me, size, comm.device))
    peer = me ^ 1
    active = me % 2 == 0 and peer < n  # one direction: even PEs put to / get from odd ones
    for op in ("put", "get"):
        for grid, block in ((8, 1024), (32, 1024), (132, 512)):
            sync(comm)
            if not active:
                continue
            fn = kernel(f"{op}_block")
            start, stop = cp.cuda.Event(), cp.cuda.Event()
            for i in range(iters + 2):
                if i == 2:
                    start.record()
                d, s = bufs[i % rotate], bufs[rotate + i % rotate]
                fn(
                    (grid,),
                    (block,),
                    (dev, d.data_ptr(), s.data_ptr(), np.uint64(size), np.int32(peer), np.int32(0)),
                )
            stop.record()
            stop.synchronize()
            ms = cp.cuda.get_elapsed_time(start, stop) / iters
            print(f"BW {op} 32MiB {grid}x{block}: {size / ms / 1e6:.1f} GB/s ({ms * 1e3:.1f} us)")
    sync(comm)
    for b in bufs:
        comm.free(b)


def main() -> None:
    scenarios = sys.argv[1:]  # one or more, run in order on one comm
    comm = gshmem.init()
    cp.cuda.Device(comm.device).use()
    try:
        dev = device_handle(comm).numpy()
        module().compile()
        for scenario in scenarios:
            globals()[f"scenario_{scenario}"](comm, dev)
            sync(comm)
            print(f"PASS {scenario}", flush=True)
    except BaseException:
        comm.abort()
        raise
    comm.finalize()


if __name__ == "__main__":
    main()
