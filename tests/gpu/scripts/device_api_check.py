"""GPU checks of the device API, run as one rank of `python -m gshmem.run -n N`.

Usage: device_api_check.py SCENARIO
  rma     put/get/put_nbi/get_nbi at thread, warp and block scope (thread scope twice: lanes
          whose copies tile one range, and lanes reversed): 1 B .. 32 MiB, odd sizes, every
          relative alignment, random data, poisoned destinations and guard bytes
  signal  put_signal(_nbi) SET/ADD at every scope, receiver waits then reads (signal_wait_until)
  pg      p/g on 1-, 2-, 4-, 8-byte integers, float, double
  strided iput/iget on int and double at every scope, several strides
  amo     every atomic on int32/uint32/int64/uint64 from every thread of every PE, exact totals;
          float/double add, set, fetch
  order   data-before-signal ping-pong, thousands of rounds, several sizes
  packets put_packets/wait_packets (bounded and not) round a ring at every scope: 1 B .. 64 KiB,
          odd sizes and offsets, many rounds per launch with credits, guard bytes around dst
  wait    wait_until(_all/_any/_some), test(_all/_any/_some), signal_fetch
  barrier team barrier/sync in loops at every scope: world, split_strided, split_2d teams
  ptr     ptr/team_ptr, team arithmetic on the device, the DeviceHandle fields
  coll_movers  collectives in kernels that move data (broadcast, all_gather, all_to_all) at
          every scope on the world team and a split_strided one, odd sizes up to 4 MiB, offsets
          and in place; many rounds per launch on the same buffers
  coll_reduce  all_reduce and reduce_scatter in kernels on the same teams: every element type
          and operator at block scope on odd sizes (fp32 and bf16 sums also at 4 MiB, with
          offsets and in place), int32 sum at warp and thread scope
  bw      put/get bandwidth at 32 MiB (printed, not checked)
Prints "PASS <scenario>" on success; any failure raises (non-zero exit). The coll scenarios
print one line per case with its time on rank 0, so a slow or stuck case shows by name.

The kernels (tests/gpu/kernels/device_api_test.cu) are compiled once per process by CuPy's
RawModule (NVRTC); the option -DGSHMEM_HEADERS=<digest> keys CuPy's cache on the headers too.
The 16-bit float reductions include cuda_fp16.h and cuda_bf16.h, which NVRTC finds only through
the CUDA toolkit's include directory: cuda_include() passes it (found from CUDA_PATH, CUDA_HOME,
/usr/local/cuda or nvcc's place).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import cupy as cp
import numpy as np
import torch

import gshmem
from gshmem.device import device_handle, packet_buffer_bytes
from gshmem.team import Team

KERNELS = Path(__file__).resolve().parents[1] / "kernels" / "device_api_test.cu"
SCOPES = {"thread": (64, 128), "warp": (16, 256), "block": (8, 512)}  # grid, block
POISON = 0xA5

# GSHMEM_TEST_SMALL=1: small sizes and few rounds, for runs under compute-sanitizer.
SMALL = os.environ.get("GSHMEM_TEST_SMALL") == "1"
# GSHMEM_TRANSPORT=proxy: every peer through the proxy path, where each scope unit's call is one
# descriptor and each blocking call one network flush; the RMA and signal matrices then use
# smaller grids (still hundreds of concurrent producers) and fewer offsets.
PROXY = os.environ.get("GSHMEM_TRANSPORT") == "proxy"
if PROXY:
    SCOPES = {"thread": (4, 64), "warp": (4, 128), "block": (4, 256)}


@functools.cache
def raw_module(kernels: Path) -> cp.RawModule:
    """The kernels of `kernels` compiled by NVRTC, with gshmem's headers (their digest in the
    options, so CuPy's cache misses when a header changed)."""
    inc = Path(gshmem.include_dir())
    digest = hashlib.sha256()
    for h in sorted((inc / "gshmem").rglob("*")):
        if h.is_file():
            digest.update(h.read_bytes())
    return cp.RawModule(
        code=kernels.read_text(),
        options=(
            f"-I{inc}",
            *cuda_include(),
            "-std=c++17",
            f"-DGSHMEM_HEADERS={digest.hexdigest()[:16]}",
        ),
    )


def module() -> cp.RawModule:
    return raw_module(KERNELS)


def cuda_include() -> tuple[str, ...]:
    """-I for the CUDA toolkit's headers (cuda_fp16.h, cuda_bf16.h), when they can be found."""
    nvcc = shutil.which("nvcc")
    roots = [os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME"), "/usr/local/cuda"]
    roots += [str(Path(nvcc).resolve().parents[1])] if nvcc else []
    for d in (Path(r) / "include" for r in roots if r):
        if (d / "cuda_bf16.h").is_file():
            return (f"-I{d}",)
    return ()


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
    if PROXY:
        small, offsets = [1, 17, 255, 4099, 65541], [(0, 0), (5, 5), (3, 0)]
    cap = max(small + large) + 64
    src = comm.empty((cap,), torch.uint8)
    dst = comm.empty((cap,), torch.uint8)
    case = 0
    for op in ("put", "get"):
        # thread_reversed: thread scope with each warp's lanes taking their chunks in reverse,
        # so that their copies take the per-lane path rather than one range (copy.cuh)
        for scope, (grid, block) in {**SCOPES, "thread_reversed": SCOPES["thread"]}.items():
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
            for nelems in (1, 33, 1000) if PROXY else (1, 33, 1000, 100003):
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
    # through the proxy every fetching atomic is a network round trip, and the compare-and-swap
    # loops of every thread contend across them: fewer threads
    grid, block, iters = (2, 32, 2) if PROXY else (8, 128, 3)
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
        theirs = torch.empty_like(fetched)
        for q in range(n):  # a get: a proxy PE's memory is not mapped here
            comm.get(theirs, fetched, q)
            torch.cuda.synchronize(comm.device)
            view = theirs.cpu().numpy().view(np_dtype)
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


def scenario_packets(comm: gshmem.Comm, dev: np.ndarray) -> None:
    sizes = [1, 7, 8, 9, 100, 4099] + ([] if SMALL else [(64 << 10) + 5])
    rounds = 20 if SMALL else 200
    cap = max(sizes) + 64
    buf = comm.zeros((packet_buffer_bytes(cap),), torch.uint8)
    src = comm.empty((cap,), torch.uint8)
    dst = torch.empty((cap,), dtype=torch.uint8, device=f"cuda:{comm.device}")
    credit = comm.zeros((1,), torch.int64)
    errors = torch.zeros((3,), dtype=torch.int64, device=f"cuda:{comm.device}")
    # Each launch's epochs follow the last one's, so no packet left by a launch (up to its last
    # round's epoch) can match a later launch's round before that round's data arrives.
    epoch = 1 << 20
    for scope, threads in (("thread", 1), ("warp", 32), ("block", 256)):
        for size in sizes:
            for src_off, dst_off, bounded in ((0, 0, 0), (3, 5, 1)):
                credit.zero_()
                dst.fill_(0xEE)
                errors.zero_()
                sync(comm)
                kernel(f"packets_{scope}")(
                    (1,),
                    (threads,),
                    (dev, buf.data_ptr(), src.data_ptr() + src_off,
                     dst.data_ptr() + 16 + dst_off, np.uint64(size), np.int32(rounds),
                     np.uint32(epoch), credit.data_ptr(), np.int32(bounded),
                     errors.data_ptr()),
                )  # fmt: skip
                epoch += rounds
                sync(comm)
                bad, guard, gave_up = (int(e) for e in errors.tolist())
                what = f"packets<{scope}> {size} B, offsets {src_off}/{dst_off}, bounded {bounded}"
                check(bad == 0, f"{what}: {bad} wrong bytes")
                check(guard == 0, f"{what}: {guard} guard bytes overwritten")
                check(gave_up == 0, f"{what}: a bounded wait gave up {gave_up} times")
    for t in (credit, src, buf):
        comm.free(t)


def scenario_wait(comm: gshmem.Comm, dev: np.ndarray) -> None:
    n = comm.nranks
    value = 7
    for exclude in (None, 0):
        flags = comm.zeros((n,), torch.int64)
        status = torch.zeros((n,), dtype=torch.int32, device=f"cuda:{comm.device}")
        if exclude is not None:
            status[exclude] = 1
        out = torch.full((12,), -5, dtype=torch.int64, device=f"cuda:{comm.device}")
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
        check(o[7] == 1 and o[10] == 1 and o[11] == 1, f"bounded waits: {o[7:]}")
        check(0 <= o[8] < n and o[8] != exclude and 1 <= o[9] <= included, f"bounded: {o[7:]}")
        comm.check()  # none of them recorded a fault
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


# ---- collectives in kernels ----------------------------------------------------------------
# Every case launches one unit of the scope (grid 1) per PE, which runs the collective `rounds`
# times on the same buffers with inputs alternating between two random sets (coll_rounds in the
# kernels): the device counts rounds whose dest differs from the first result of the same
# parity; the host checks both results against a reference built from every member's inputs,
# read back through peer_tensor.
COLL_THREADS = {"thread": 1, "warp": 32, "block": 512}
COLL_SIZES = (1, 3, 1000, 65537)  # bytes or elements (a tuple: never extended in place)
REDUCE_DTYPES = {
    "f32": torch.float32,
    "f16": torch.float16,
    "bf16": torch.bfloat16,
    "i32": torch.int32,
    "i64": torch.int64,
}
REDUCE_OPS = ("sum", "prod", "min", "max")


def coll_rounds(dest_bytes: int) -> int:
    """Many rounds where one is short: reuse races then get many chances to show."""
    if SMALL:
        return 4
    return 100 if dest_bytes <= 4096 else 10 if dest_bytes <= (1 << 20) else 3


def coll_input(seed: int, count: int, dtype: torch.dtype, op: str, device: int) -> torch.Tensor:
    """`count` random elements as bytes: any bit pattern for integers; floats of either sign, in
    [0.5, 2) in magnitude for prod (so products of 4 stay far from overflow and subnormals) and
    standard normal otherwise."""
    if not dtype.is_floating_point:
        return random_bytes(seed, count * torch.empty((), dtype=dtype).element_size(), device)
    g = torch.Generator(device=f"cuda:{device}").manual_seed(seed)
    if op == "prod":
        sign = torch.randint(0, 2, (count,), generator=g, device=f"cuda:{device}") * 2 - 1
        x = sign * (0.5 + 1.5 * torch.rand(count, generator=g, device=f"cuda:{device}"))
    else:
        x = torch.randn(count, generator=g, device=f"cuda:{device}")
    return x.to(dtype).view(torch.uint8)


def check_reduced(got: torch.Tensor, xs: list[torch.Tensor], op: str, what: str) -> None:
    """`got` against `op` over the members' inputs `xs` (team order, same dtype), all on this
    PE's GPU: the float references are computed there in fp64 (on the CPU, the 4 MiB cases made
    this check most of the scenario's time).

    Integers: exact, sum and prod modulo 2^bits. Float min/max: exact (the result is one of the
    inputs). Float sum/prod accumulate in fp32 over k = len(xs) - 1 steps and round once to the
    element type (unit roundoff u), so against the fp64 reference
        |got - ref| <= 2 * (k * 2^-24 * S + u * |ref|) + (smallest subnormal of the type),
    with S = sum of |x| for sum and |ref| for prod (first-order error bounds, doubled)."""
    if not got.dtype.is_floating_point:
        x = np.stack([v.cpu().numpy() for v in xs])
        if op in ("min", "max"):
            ref = x.min(0) if op == "min" else x.max(0)
        else:
            wide = x.astype(np.uint64)  # modulo 2^64, then keep the low bits
            acc = np.add.reduce(wide, 0) if op == "sum" else np.multiply.reduce(wide, 0)
            ref = acc.astype(f"u{x.itemsize}").view(x.dtype)
        check(np.array_equal(got.cpu().numpy(), ref), f"{what}: wrong values")
        return
    x = torch.stack([v.double() for v in xs])
    ref = {"sum": x.sum(0), "prod": x.prod(0), "min": x.amin(0), "max": x.amax(0)}[op]
    if op in ("min", "max"):
        check(torch.equal(got.double(), ref), f"{what}: not exactly the {op}")
        return
    fi = torch.finfo(got.dtype)
    scale = x.abs().sum(0) if op == "sum" else ref.abs()
    tol = 2 * ((len(xs) - 1) * 2.0**-24 * scale + fi.eps / 2 * ref.abs()) + fi.tiny * fi.eps
    excess = (got.double() - ref).abs() - tol
    bad = int((excess > 0).sum())
    check(bad == 0, f"{what}: {bad} elements beyond tolerance (worst by {float(excess.max()):.3g})")


class CollBuffers:
    """The symmetric buffers of every coll case, allocated once: dest, src, a case's two inputs
    back to back, and the results of rounds 0 and 1 back to back."""

    def __init__(self, comm: gshmem.Comm, cap: int):
        self.comm = comm
        self.dest = comm.empty((cap,), torch.uint8)
        self.src = comm.empty((cap,), torch.uint8)
        self.inputs = comm.empty((2 * cap,), torch.uint8)
        self.saved = comm.empty((2 * cap,), torch.uint8)

    def run(
        self,
        dev: np.ndarray,
        kernel_name: str,
        team: Team,
        inputs: tuple[torch.Tensor, torch.Tensor],
        dest_bytes: int,
        n: int,
        dest_off: int,
        src: int,
        root: int,
        what: str,
    ) -> tuple[list[list[torch.Tensor]], list[tuple[int, torch.Tensor]]]:
        """One case of kernel coll_<kernel_name> (its last word names the scope): dest at
        `dest_off` in the dest buffer, src at address `src` (in the src buffer, or in the dest
        buffer when in place); `inputs`: this PE's two inputs (uint8, equal sizes). Checks the
        device's count of differing rounds and that nothing outside dest and src was written.
        Returns every member's two inputs (team order) and (parity, this PE's dest) for round 0,
        round 1 and the last round, as copies on this PE's GPU."""
        comm = self.comm
        src_bytes = inputs[0].numel()
        rounds = coll_rounds(dest_bytes)
        t0 = time.perf_counter()
        sync(comm)  # every PE is done reading the previous case's buffers
        self.inputs[: 2 * src_bytes].copy_(torch.cat(inputs))
        self.dest.fill_(POISON)
        errors = torch.zeros((1,), dtype=torch.int64, device=f"cuda:{comm.device}")
        sync(comm)
        kernel(f"coll_{kernel_name}")(
            (1,),
            (COLL_THREADS[kernel_name.rsplit("_", 1)[1]],),
            (
                dev,
                team.numpy(),
                self.dest.data_ptr() + dest_off,
                src,
                self.inputs.data_ptr(),
                self.saved.data_ptr(),
                np.uint64(n),
                np.int32(root),
                np.int32(rounds),
                errors.data_ptr(),
            ),
        )
        sync(comm)
        if comm.rank == 0:
            print(f"case {what}: {rounds} rounds, {time.perf_counter() - t0:.3f} s", flush=True)
        check(int(errors) == 0, f"{what}: {int(errors)} bytes of dest changed between rounds")
        lo, hi = dest_off, dest_off + dest_bytes
        base = self.dest.data_ptr()
        if base <= src < base + self.dest.numel():  # in place: src is written too
            lo, hi = min(lo, src - base), max(hi, src - base + src_bytes)
        outside = torch.cat([self.dest[:lo], self.dest[hi : hi + 64]])
        check(bool((outside == POISON).all()), f"{what}: wrote outside dest")
        members = []
        for q in team.members():
            theirs = comm.peer_tensor(self.inputs, q)[: 2 * src_bytes].clone()
            members.append([theirs[:src_bytes], theirs[src_bytes:]])
        saved = self.saved[: 2 * dest_bytes].clone()
        results = [
            (0, saved[:dest_bytes]),
            (1, saved[dest_bytes:]),
            ((rounds - 1) % 2, self.dest[dest_off : dest_off + dest_bytes].clone()),
        ]
        return members, results

    def same_on_every_member(self, team: Team, dest_bytes: int) -> bool:
        """Whether every member's results of rounds 0 and 1 have the same bits as this PE's."""
        mine = self.saved[: 2 * dest_bytes]
        return all(
            torch.equal(self.comm.peer_tensor(self.saved, q)[: 2 * dest_bytes], mine)
            for q in team.members()
        )

    def free(self) -> None:
        for t in (self.saved, self.inputs, self.src, self.dest):
            self.comm.free(t)


def coll_teams(comm: gshmem.Comm) -> dict[str, Team]:
    """The world, and evens/odds (split_strided; a team of one PE at 2 PEs)."""
    n, me = comm.nranks, comm.rank
    world = Team.world(comm)
    return {"world": world, "evens/odds": world.split_strided(me % 2, 2, (n - me % 2 + 1) // 2)}


def coll_src(bufs: CollBuffers, dest_off: int, src_off: int | None, in_dest: int) -> int:
    """Address of src: at src_off in the src buffer, or (src_off None: in place) `in_dest`
    bytes after dest."""
    if src_off is None:
        return bufs.dest.data_ptr() + dest_off + in_dest
    return bufs.src.data_ptr() + src_off


def coll_movers(comm: gshmem.Comm, dev: np.ndarray, bufs: CollBuffers, case: Iterator[int]) -> None:
    """broadcast, all_gather, all_to_all: byte-exact against the members' inputs."""
    me = comm.rank
    movers = ("broadcast", "all_gather", "all_to_all")
    for (tname, team), scope, name in itertools.product(
        coll_teams(comm).items(), COLL_THREADS, movers
    ):
        block = scope == "block"
        # Thread and warp scope move every byte through one or 32 threads: small sizes only.
        sizes = list(COLL_SIZES if block else COLL_SIZES[:3])
        sizes = sizes + ([4 << 20] if block and name == "all_gather" and not SMALL else [])
        # (label, dest offset, src offset; None: in place)
        places = [("aligned", 0, 0), ("offsets 3/0", 3, 0)]
        if block:
            places += [("offsets 8/24", 8, 24)]
            places += [("in place", 16, None)] if name != "all_to_all" else []
        for nbytes, (label, doff, soff) in itertools.product(sizes, places):
            k = next(case)
            src_bytes = nbytes * (team.size if name == "all_to_all" else 1)
            dest_bytes = nbytes * (1 if name == "broadcast" else team.size)
            in_dest = team.rank * nbytes if name == "all_gather" else 0
            src = coll_src(bufs, doff, soff, in_dest)
            inputs = tuple(
                random_bytes(k * 4096 + me * 2 + p, src_bytes, comm.device) for p in (0, 1)
            )
            root = k % team.size
            what = f"{name}<{scope}> on {tname}, {nbytes} B, {label}, root {root}"
            members, results = bufs.run(
                dev, f"{name}_{scope}", team, inputs, dest_bytes, nbytes, doff, src, root, what
            )
            mine = slice(team.rank * nbytes, (team.rank + 1) * nbytes)
            for parity, got in results:
                if name == "broadcast":
                    want = members[root][parity]
                elif name == "all_gather":
                    want = torch.cat([m[parity] for m in members])
                else:
                    want = torch.cat([m[parity][mine] for m in members])
                check(torch.equal(got, want), f"{what}: wrong data (inputs {parity})")


def coll_reductions(
    comm: gshmem.Comm, dev: np.ndarray, bufs: CollBuffers, case: Iterator[int]
) -> None:
    """all_reduce, reduce_scatter: every element type and operator at block scope, int32 sum at
    warp and thread scope; check_reduced against the members' inputs, and all_reduce's bits the
    same on every member."""
    me = comm.rank
    kinds = [(tn, op, "block") for tn in REDUCE_DTYPES for op in REDUCE_OPS]
    kinds += [("i32", "sum", "warp"), ("i32", "sum", "thread")]
    # Every element type and operator on odd sizes; offsets, in place and 4 MiB on fp32 and bf16
    # sums (the paths do not depend on the type beyond its size).
    wide = {("f32", "sum"), ("bf16", "sum")}
    names = ("all_reduce", "reduce_scatter")
    for (tname, team), name, (tn, op, scope) in itertools.product(
        coll_teams(comm).items(), names, kinds
    ):
        if tname != "world" and (tn, op) not in wide:
            continue  # sub-teams: the widest kinds only
        dtype = REDUCE_DTYPES[tn]
        esize = torch.empty((), dtype=dtype).element_size()
        block = scope == "block"
        full = block and (tn, op) in wide
        counts = list(COLL_SIZES) if full else [3, 65537] if block else [3, 1000]
        counts = counts + ([(4 << 20) // esize] if full and not SMALL else [])
        # (label, dest offset, src offset; None: in place), in bytes
        places = [("aligned", 0, 0)]
        if full:
            places += [
                ("offsets 1/1", esize, esize),
                ("offsets 1/0", esize, 0),
                ("in place", 16, None),
            ]
        scattered = name == "reduce_scatter"
        for count, (label, doff, soff) in itertools.product(counts, places):
            k = next(case)
            dest_bytes = count * esize
            src = coll_src(bufs, doff, soff, 0)
            if soff is None and scattered:  # in place: dest is my block of src
                doff += team.rank * dest_bytes
            src_count = count * (team.size if scattered else 1)
            inputs = tuple(
                coll_input(k * 4096 + me * 2 + p, src_count, dtype, op, comm.device) for p in (0, 1)
            )
            what = f"{name}<{tn}, {op}, {scope}> on {tname}, {count} elements, {label}"
            members, results = bufs.run(
                dev,
                f"{name}_{tn}_{op}_{scope}",
                team,
                inputs,
                dest_bytes,
                count,
                doff,
                src,
                0,
                what,
            )
            mine = slice(team.rank * count, (team.rank + 1) * count)
            for parity, got in results:
                xs = [m[parity].view(dtype) for m in members]
                xs = [x[mine] for x in xs] if scattered else xs
                check_reduced(got.view(dtype), xs, op, f"{what} (inputs {parity})")
            if not scattered:
                same = bufs.same_on_every_member(team, dest_bytes)
                check(same, f"{what}: members got different bits")


def run_coll(comm: gshmem.Comm, dev: np.ndarray, cases) -> None:
    bufs = CollBuffers(comm, comm.nranks * (4 << 20) + 4096)
    cases(comm, dev, bufs, itertools.count(1))
    sync(comm)  # nobody still reads these buffers
    bufs.free()


def scenario_coll_movers(comm: gshmem.Comm, dev: np.ndarray) -> None:
    run_coll(comm, dev, coll_movers)


def scenario_coll_reduce(comm: gshmem.Comm, dev: np.ndarray) -> None:
    run_coll(comm, dev, coll_reductions)


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


def run_scenarios(namespace: dict, compile_kernels: Callable[[], object]) -> None:
    """Runs the scenarios named on the command line, in order, on one comm: each is
    namespace["scenario_<name>"](comm, dev). Shared with proxy_check.py."""
    scenarios = sys.argv[1:]
    comm = gshmem.init()
    cp.cuda.Device(comm.device).use()
    if os.environ.get("GSHMEM_TEST_STREAM") == "nonblocking":
        cp.cuda.Stream(non_blocking=True).use()
    try:
        dev = device_handle(comm).numpy()
        compile_kernels()
        for scenario in scenarios:
            namespace[f"scenario_{scenario}"](comm, dev)
            sync(comm)
            print(f"PASS {scenario}", flush=True)
    except BaseException:
        comm.abort()
        raise
    comm.finalize()


def main() -> None:
    run_scenarios(globals(), lambda: module().compile())


if __name__ == "__main__":
    main()
