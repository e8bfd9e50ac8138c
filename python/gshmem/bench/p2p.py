"""The point-to-point suite: ``python -m gshmem.bench p2p [options]`` (DESIGN.md §7).

Options (NVSHMEM perftest's ``-b -e -f -n -w -c -t``) live in ``options.py``, the NVSHMEM
baseline in ``nvshmem.py``, the table and JSON in ``report.py``. ``run(opts)`` is the GPU part:
every PE of a launched job (``python -m gshmem.run -n 2``) calls it. It is collective: all PEs
run the same measurements in the same order, meeting at host barriers (``comm.barrier``,
bounded by GSHMEM_TIMEOUT) and device barriers (the ``start_sync`` kernel). Every wait on the
GPU is bounded too (GSHMEM_BENCH_WAIT_TIMEOUT, default 120 s), so a lost peer or signal ends
the run with a message instead of a hang.

Measurement (PERFORMANCE.md "How to measure"): random data; a transfer is validated once per row
and size before it is timed; a device barrier lines up the PEs, then CUDA events bracket
``-n`` iterations (raised for small sizes so each timed region moves at least 256 MiB), after
``-w`` warm-up iterations; the median of ``--repeats``; buffers rotate through slots when a size
fits in L2. Bandwidth = bytes moved by one PE / time, GB = 1e9 bytes; bidirectional rows use the
slower PE's time.
"""

from __future__ import annotations

import hashlib
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gshmem.bench.nccl_group import join_nccl
from gshmem.bench.nvshmem import nvshmem_rows
from gshmem.bench.options import Options, iters_for, proxy_env_missing, slots_for
from gshmem.bench.report import Row, bandwidth_gbps, median

KERNELS = Path(__file__).resolve().parent / "kernels.cu"
LATENCY_WARMUP = 50
RATE_OPS = ("p", "g", "fetch_add", "add")
ONSTREAM_METHODS = ("put", "get", "put_signal", "signal_wait_until", "quiet")


def device_bw_ops(path: str) -> tuple[str, ...]:
    """The device_bw rows' operations: blocking put and get; through the proxy also their
    non-blocking forms with one quiet per launch (a blocking call there appends a quiet of its
    own and waits for it; on the direct path both forms are the same stores)."""
    return ("put", "get", "put_nbi", "get_nbi") if path == "proxy" else ("put", "get")


def bw_mode(op: str) -> int:
    """bw_loop's mode bits (bench/kernels.cu) for a device_bw operation."""
    return int(op.startswith("get")) | (2 if op.endswith("_nbi") else 0)


class BenchError(RuntimeError):
    """A measurement could not be made or was wrong; the message says which and why."""


# -- the GPU part ---------------------------------------------------------------------------------


def _wait_limit() -> float:
    try:
        return float(os.environ.get("GSHMEM_BENCH_WAIT_TIMEOUT", "120"))
    except ValueError:
        return 120.0


def _module() -> Any:
    """The bench kernels, compiled once per process by CuPy (NVRTC); the digest of the headers
    and the source keys CuPy's cache."""
    import cupy as cp

    import gshmem

    inc = Path(gshmem.include_dir())
    digest = hashlib.sha256(KERNELS.read_bytes())
    for h in sorted((inc / "gshmem").rglob("*")):
        if h.is_file():
            digest.update(h.read_bytes())
    module = cp.RawModule(
        code=KERNELS.read_text(),
        options=(f"-I{inc}", "-std=c++17", f"-DGSHMEM_HEADERS={digest.hexdigest()[:16]}"),
    )
    try:
        module.compile()
    except Exception as e:  # noqa: BLE001 - CuPy's compile errors carry the NVRTC log
        raise BenchError(f"compiling {KERNELS.name} failed: {e}") from None
    return module


_RATE_PATTERN = 0x9E3779B97F4A7C15 - (1 << 64)  # kernels.cu rate_pattern, as a signed int64


class Bench:
    """One PE's state for the suite. Every method that measures is collective: all PEs call it
    with the same arguments; ``active`` PEs issue the transfers (PE 2k to 2k+1 one way, both
    ways for bidir), the others only meet the barriers."""

    def __init__(self, comm: Any, o: Options) -> None:
        import cupy as cp
        import numpy as np
        import torch

        from gshmem.device import device_handle, packet_buffer_bytes

        self.cp, self.np, self.torch = cp, np, torch
        self.comm, self.o = comm, o
        self.rank, self.n = comm.rank, comm.nranks
        self.peer = self.rank ^ 1
        self.paired = self.peer < self.n  # with an odd PE count the last PE sits out
        self.device = comm.device
        torch.cuda.set_device(self.device)
        self.stream = torch.cuda.Stream(self.device)
        torch.cuda.set_stream(self.stream)  # torch ops and the on-stream API default to it
        cp.cuda.Device(self.device).use()
        cp.cuda.ExternalStream(self.stream.cuda_stream).use()  # CuPy launches go there too
        self.dev = device_handle(comm).numpy()
        self.sms = torch.cuda.get_device_properties(self.device).multi_processor_count
        self.gpu = torch.cuda.get_device_name(self.device)
        self.module = _module()
        self.rows: list[Row] = []
        self.box = comm.zeros((self.n,), torch.float64)
        self.sig = comm.zeros((8,), torch.int64)
        # put_packets' landing buffer for the largest ping-pong
        self.packets = comm.zeros((packet_buffer_bytes(max(o.latency_sizes)),), torch.uint8)
        self.devices = [int(d) for d in self.gather(float(self.device))]
        sizes = o.sizes()
        self.cap = max([slots_for(s) * s for s in sizes] + o.latency_sizes)
        self.src = comm.empty((self.cap,), torch.uint8)
        self.dst = comm.empty((self.cap,), torch.uint8)
        self.src.copy_(self.random(1234 + self.rank, self.cap))
        # What the peer's src holds: every check reads only this PE's memory, so it works on
        # every path (the proxy path has no load/store view of a peer).
        self.peer_src = self.random(1234 + self.peer, self.cap) if self.paired else self.src
        nthreads = max(c * t for c, t in self.o.rate_configs())
        self.rbuf = comm.zeros((8 * nthreads,), torch.int64)
        self.sync("setup")

    # -- plumbing ---------------------------------------------------------------------------------
    def log(self, text: str) -> None:
        if self.rank == 0:
            print(text, flush=True)

    def random(self, seed: int, nbytes: int) -> Any:
        torch = self.torch
        g = torch.Generator(device=f"cuda:{self.device}").manual_seed(seed)
        return torch.randint(
            0, 256, (nbytes,), generator=g, device=f"cuda:{self.device}", dtype=torch.uint8
        )

    def kernel(self, name: str) -> Any:
        return self.module.get_function(name)

    def wait(self, what: str) -> None:
        """Waits for this PE's stream, at most GSHMEM_BENCH_WAIT_TIMEOUT seconds."""
        ev = self.torch.cuda.Event()
        ev.record(self.stream)
        limit = _wait_limit()
        deadline = time.monotonic() + limit
        while not ev.query():
            if time.monotonic() > deadline:
                raise BenchError(
                    f"rank {self.rank}: '{what}' did not finish on the GPU within {limit:g} s "
                    "(a peer stopped, or a signal never came); GSHMEM_BENCH_WAIT_TIMEOUT sets "
                    "the limit"
                )
            time.sleep(0.0002)

    def sync(self, what: str) -> None:
        """This PE's GPU work is done, then a host barrier (collective)."""
        self.wait(what)
        self.comm.barrier()

    def start_sync(self) -> None:
        """A device barrier of every PE on the stream: the next kernels start together."""
        self.kernel("start_sync")((1,), (1,), (self.dev,))

    def gather(self, value: float | None) -> list[float]:
        """Every PE's ``value`` (None: NaN), in rank order (collective). On-stream puts carry it,
        so it works on the direct and the proxy path alike."""
        v = float("nan") if value is None else float(value)
        mine = self.box[self.rank : self.rank + 1]
        mine.fill_(v)
        for q in range(self.n):
            if q != self.rank:
                self.comm.put(mine, mine, q)
        self.comm.quiet()
        self.sync("gather")
        out = [float(x) for x in self.box.tolist()]
        self.comm.barrier()
        return out

    def check(self, ok: bool, what: str) -> None:
        """Raises on every PE when the data was wrong on any (collective)."""
        bad = [q for q, v in enumerate(self.gather(1.0 if ok else 0.0)) if v != 1.0]
        if bad:
            raise BenchError(f"{what}: wrong data seen by PE(s) {bad}")

    def timed(self, launch: Callable[[int], None] | None, iters: int, what: str) -> float | None:
        """Warm-up, then ``repeats`` x (device barrier, events around launch(iters)); the median
        seconds on PEs with a launch, None on the others (collective)."""
        torch = self.torch
        if launch is not None and self.o.warmup > 0:
            launch(self.o.warmup)
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(self.o.repeats):
            self.start_sync()
            if launch is not None:
                start.record(self.stream)
                launch(iters)
                stop.record(self.stream)
            self.wait(what)
            if launch is not None:
                times.append(start.elapsed_time(stop) / 1e3)
        return median(times) if times else None

    def slowest(self, t: float | None) -> float | None:
        valid = [x for x in self.gather(t) if not math.isnan(x)]
        return max(valid) if valid else None

    def add(self, row: Row) -> None:
        self.rows.append(row)
        shown = "-" if row.value is None else f"{row.value:.3f}"
        where = f"{row.scope} {row.config()}" if row.path == "device" else row.path
        size = f" {row.size} B" if row.size else ""
        self.log(
            f"  {row.impl} {row.op} {where} {row.direction}{size}: {shown} {row.unit} "
            f"{row.note}".rstrip()
        )

    def roles(self, direction: str) -> tuple[bool, bool]:
        """(issues the transfer, owns the destination of a put) for this PE."""
        if not self.paired:
            return False, False
        if direction == "bidir":
            return True, True
        return self.rank % 2 == 0, self.rank % 2 == 1

    # -- device put/get bandwidth -----------------------------------------------------------------
    def device_bw(self, scope: str, ctas: int, threads: int, direction: str, op: str,
                  size: int) -> None:  # fmt: skip
        np = self.np
        active, _ = self.roles(direction)
        slots, iters = slots_for(size), iters_for(size, self.o.iters)
        fn = self.kernel(f"bw_{scope}")
        what = f"device {op}<{scope}> {ctas}x{threads} {direction} {size} B"

        def launch(n: int, nslots: int = slots) -> None:
            fn(
                (ctas,),
                (threads,),
                (self.dev, self.dst.data_ptr(), self.src.data_ptr(), np.uint64(size),
                 np.uint64(size), np.int32(nslots), np.int32(n), np.int32(self.peer),
                 np.int32(bw_mode(op))),
            )  # fmt: skip

        self.validate(op, size, direction, lambda: launch(1, 1), what)
        t = self.slowest(self.timed(launch if active else None, iters, what))
        self.add(Row("gshmem", op, "device", "GB/s",
                     None if t is None else bandwidth_gbps(size * iters, t), size, scope, ctas,
                     threads, direction, min(ctas, self.sms)))  # fmt: skip

    def validate(self, op: str, size: int, direction: str, transfer: Callable[[], None],
                 what: str) -> None:  # fmt: skip
        """Collective: poisons the destination, runs one transfer on the active PEs, and checks
        that the destination holds the source where it lies: for a put on the PE that owns it,
        for a get on the PE that issued it."""
        active, owner = self.roles(direction)
        self.dst[:size].fill_(0xA5)
        self.sync(f"{what}: poison")
        if active:
            transfer()
        self.sync(f"{what}: validation")
        checks = active if op.startswith("get") else owner
        self.check(not checks or self.holds_peer_src(size), what)

    def holds_peer_src(self, size: int) -> bool:
        """Whether this PE's dst starts with ``size`` bytes of the peer's src."""
        return self.torch.equal(self.dst[:size], self.peer_src[:size])

    # -- message rates ----------------------------------------------------------------------------
    def rate(self, op: str, ctas: int, threads: int) -> None:
        np, torch = self.np, self.torch
        active, _ = self.roles("uni")
        nthreads = ctas * threads
        nelems = nthreads * 8 if op in ("p", "g") else nthreads
        out = torch.zeros((nelems,), dtype=torch.int64, device=f"cuda:{self.device}")
        fn = self.kernel("rate")
        what = f"{op} rate {ctas}x{threads}"

        def launch(n: int, check: int = 0) -> None:
            fn(
                (ctas,),
                (threads,),
                (self.dev, self.rbuf.data_ptr(), np.uint64(nelems), np.int32(n),
                 np.int32(self.peer), np.int32(RATE_OPS.index(op)), np.int32(check),
                 out.data_ptr()),
            )  # fmt: skip

        if op == "g":
            self.rbuf[:nelems].view(torch.uint8).copy_(self.random(99 + self.rank, 8 * nelems))
        else:
            self.rbuf.zero_()
        self.sync(f"{what}: setup")
        if active:
            launch(8 if op in ("p", "g") else 4, check=int(op == "g"))
        self.sync(f"{what}: validation")
        ok = True
        if active:  # a get: a proxy peer's memory is not mapped here
            theirs = torch.empty_like(self.rbuf[:nelems])
            self.comm.get(theirs, self.rbuf[:nelems], self.peer)
            torch.cuda.synchronize(self.device)
            if op == "p":
                idx = torch.arange(nelems, dtype=torch.int64, device=f"cuda:{self.device}")
                ok = torch.equal(theirs, idx * _RATE_PATTERN + 1)
            elif op == "g":
                ok = torch.equal(out, theirs)
            else:
                ok = bool((theirs == 4).all())
        self.check(ok, what)
        iters = self.o.rate_iters
        t = self.slowest(self.timed(launch if active else None, iters, what))
        value = None if t is None else nthreads * iters / t / 1e6
        self.add(Row("gshmem", op, "device", "Mops/s", value, 8, "thread", ctas, threads, "uni",
                     min(ctas, self.sms)))  # fmt: skip

    # -- ping-pong: put_signal, or packets ---------------------------------------------------------
    def pingpong(self, scope: str, size: int, bounded: bool, packets: bool) -> None:
        """Device ping-pong: put_signal + signal_wait_until (op ``pingpong``), or put_packets +
        wait_packets (``pingpong_packets``: the data carries its own flags); ``bounded``: the waits
        are the bounded form (GSHMEM_TIMEOUT, abort), ``_bounded`` appended to the op, so one run
        shows what the deadline costs."""
        np, torch = self.np, self.torch
        name = "pingpong" + ("_packets" if packets else "") + ("_bounded" if bounded else "")
        block = {"thread": 1, "warp": 32, "block": 256}[scope]
        initiator = self.rank % 2 == 0
        iters = self.o.latency_iters
        out = torch.zeros((1,), dtype=torch.int64, device=f"cuda:{self.device}")
        what = f"{name}<{scope}> {size} B"
        # put_signal: (dst, src, bytes, signal); packets: (dst, src, bytes, packet buffer)
        flag = self.packets if packets else self.sig
        times = []
        for _ in range(self.o.repeats):
            flag.zero_()  # the rounds' signal values and epochs start again at 1
            self.sync(f"{what}: reset")
            if self.paired:
                self.kernel(f"{name}_{scope}")(
                    (1,),
                    (block,),
                    (self.dev, self.dst.data_ptr(), self.src.data_ptr(), np.uint64(size),
                     flag.data_ptr(), np.int32(LATENCY_WARMUP), np.int32(iters),
                     np.int32(self.peer), np.int32(initiator), out.data_ptr()),
                )  # fmt: skip
            self.wait(what)
            if self.paired and initiator:
                times.append(int(out.item()) / 1e9)
        self.comm.barrier()
        self.check(not self.paired or self.holds_peer_src(size), what)
        t = self.slowest(median(times) if times else None)
        us = None if t is None else t / (2 * iters) * 1e6
        self.add(Row("gshmem", name, "device", "us", us, size, scope, 1, block, "uni", 1))

    # -- on-stream (host-issued) ------------------------------------------------------------------
    def onstream_missing(self) -> str:
        missing = [m for m in ONSTREAM_METHODS if not callable(getattr(self.comm, m, None))]
        return f"n/a: on-stream API missing ({', '.join(missing)})" if missing else ""

    def onstream_sms(self, size: int) -> int:
        """SMs an on-stream message of this size occupies: 1 (a one-block kernel) up to
        GSHMEM_STREAM_KERNEL_MAX_BYTES, else 0 (copy engines, stream memory operations)."""
        from gshmem import _C

        return 1 if size <= _C.stream_kernel_max_bytes() else 0

    def capture(self, fn: Callable[[], None]) -> tuple[Callable[[], None], str]:
        """A CUDA graph of ``fn`` (replayed on the bench stream), else ``fn`` itself: host-issued
        operations are timed without the host's enqueue cost where capture works."""
        torch = self.torch
        try:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                fn()
            self.wait("graph capture")
            return graph.replay, "graph"
        except Exception as e:  # noqa: BLE001 - falls back to eager issue, noted in the row
            self.wait("after a failed graph capture")
            return fn, f"eager ({type(e).__name__} in graph capture)"

    def onstream_bw(self, direction: str, op: str, size: int) -> None:
        active, _ = self.roles(direction)
        slots, iters = slots_for(size), iters_for(size, self.o.iters)
        dsts = [self.dst[s * size : (s + 1) * size] for s in range(slots)]
        srcs = [self.src[s * size : (s + 1) * size] for s in range(slots)]
        call = self.comm.put if op == "put" else self.comm.get
        what = f"on-stream {op} {direction} {size} B"

        def issue(n: int) -> None:
            for i in range(n):
                call(dsts[i % slots], srcs[i % slots], self.peer)
            self.comm.quiet()

        self.validate(op, size, direction, lambda: issue(1), what)
        mode = ""
        launch = None
        if active:
            replay, mode = self.capture(lambda: issue(iters))
            launch = lambda _n: replay()  # noqa: E731
        t = self.slowest(self.timed(launch, iters, what))
        self.add(Row("gshmem", op, "on_stream", "GB/s",
                     None if t is None else bandwidth_gbps(size * iters, t), size, "-", 0, 0,
                     direction, self.onstream_sms(size), mode))  # fmt: skip

    def onstream_pingpong(self, size: int) -> None:
        torch = self.torch
        comm = self.comm
        initiator = self.rank % 2 == 0
        iters = max(10, self.o.latency_iters // 5)
        sig = self.sig[1:2]
        d, s = self.dst[:size], self.src[:size]
        what = f"on-stream put_signal ping-pong {size} B"

        def rounds() -> None:
            for i in range(1, iters + 1):
                if initiator:
                    comm.put_signal(d, s, sig, i, self.peer, op="set")
                    comm.signal_wait_until(sig, "ge", i)
                else:
                    comm.signal_wait_until(sig, "ge", i)
                    comm.put_signal(d, s, sig, i, self.peer, op="set")

        replay, mode = self.capture(rounds) if self.paired else (lambda: None, "")
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(self.o.repeats + 1):  # the first round is the warm-up
            self.sig.zero_()
            self.sync(f"{what}: reset")
            self.start_sync()
            start.record(self.stream)
            if self.paired:
                replay()
            stop.record(self.stream)
            self.wait(what)
            times.append(start.elapsed_time(stop) / 1e3)
        self.comm.barrier()
        self.check(not self.paired or self.holds_peer_src(size), what)
        t = median(times[1:]) if self.paired and initiator else None
        t = self.slowest(t)
        us = None if t is None else t / (2 * iters) * 1e6
        self.add(Row("gshmem", "put_signal_wait", "on_stream", "us", us, size, "-", 0, 0, "uni",
                     self.onstream_sms(size), mode))  # fmt: skip

    # -- baselines --------------------------------------------------------------------------------
    def copy_engine(self, direction: str, op: str, size: int, remote: Any, local: Any) -> None:
        """torch peer copies across devices (cudaMemcpyPeerAsync): ``remote`` lives on the peer
        PE's GPU (allocated by this process), ``local`` on this one."""
        torch = self.torch
        active, _ = self.roles(direction)
        slots, iters = slots_for(size), iters_for(size, self.o.iters)
        what = f"copy engine {op} {direction} {size} B"
        rv = [remote[k * size : (k + 1) * size] for k in range(slots)]
        lv = [local[k * size : (k + 1) * size] for k in range(slots)]

        def launch(n: int) -> None:
            for i in range(n):
                if op == "put":
                    rv[i % slots].copy_(lv[i % slots], non_blocking=True)
                else:
                    lv[i % slots].copy_(rv[i % slots], non_blocking=True)

        ok = True
        if active:
            (rv if op == "put" else lv)[0].fill_(0xA5)
            launch(1)
            if op == "put":
                ok = torch.equal(rv[0].to(f"cuda:{self.device}"), lv[0])
            else:
                ok = torch.equal(lv[0], rv[0].to(f"cuda:{self.device}"))
        self.check(ok, what)
        t = self.slowest(self.timed(launch if active else None, iters, what))
        self.add(Row("copy_engine", op, "host", "GB/s",
                     None if t is None else bandwidth_gbps(size * iters, t), size, "-", 0, 0,
                     direction, 0))  # fmt: skip

    def nccl(self, direction: str, size: int, send: Any, recv: Any, expect: Any) -> None:
        """NCCL send/recv through torch.distributed (``expect``: the peer's send buffer)."""
        import torch.distributed as dist

        torch = self.torch
        sender, receiver = self.roles(direction)
        slots, iters = slots_for(size), iters_for(size, self.o.iters)
        what = f"NCCL send/recv {direction} {size} B"

        def launch(n: int, first: int = 0) -> None:
            for i in range(first, first + n):
                k = i % slots
                ops = []
                if sender:
                    ops.append(dist.P2POp(dist.isend, send[k * size : (k + 1) * size], self.peer))
                if receiver:
                    ops.append(dist.P2POp(dist.irecv, recv[k * size : (k + 1) * size], self.peer))
                for w in dist.batch_isend_irecv(ops):
                    w.wait()

        recv[:size].fill_(0xA5)
        self.sync(f"{what}: poison")
        if sender or receiver:
            launch(1)
        self.sync(f"{what}: validation")
        ok = not receiver or torch.equal(recv[:size], expect[:size])
        self.check(ok, what)
        active = sender or receiver
        t = self.slowest(self.timed(launch if active else None, iters, what))
        self.add(Row("nccl", "put", "host", "GB/s",
                     None if t is None else bandwidth_gbps(size * iters, t), size, "-", 0, 0,
                     direction, None, "send/recv"))  # fmt: skip

    def nccl_init(self) -> str:
        """Joins torch.distributed (NCCL) with this job's ranks; '' or why not (collective)."""
        return join_nccl(self.rank, self.n, self.device)

    # -- the suite --------------------------------------------------------------------------------
    def run_all(self) -> None:
        o = self.o
        sizes = o.sizes()
        self.log(f"gshmem.bench p2p: {self.n} PEs, {self.gpu}, {self.sms} SMs, sizes "
                 f"{sizes[0]}..{sizes[-1]} B")  # fmt: skip
        if "device_bw" in o.tests:
            for scope in o.scopes:
                for ctas, threads in o.configs(scope):
                    for direction in o.directions:
                        for op in device_bw_ops(o.path):
                            for size in sizes:
                                self.device_bw(scope, ctas, threads, direction, op, size)
        if "rate" in o.tests:
            for op in RATE_OPS:
                for ctas, threads in o.rate_configs():
                    self.rate(op, ctas, threads)
        if "latency" in o.tests:
            for scope in o.scopes:
                for size in o.latency_sizes:
                    # packets need a load/store path: not through the proxy
                    for packets in (False, True) if o.path != "proxy" else (False,):
                        for bounded in (False, True):
                            self.pingpong(scope, size, bounded, packets)
        self.onstream(sizes)
        if "copy_engine" in o.compare:
            self.run_copy_engine(sizes)
        if "nccl" in o.compare:
            self.run_nccl(sizes)

    def onstream(self, sizes: list[int]) -> None:
        o = self.o
        wanted = "onstream_bw" in o.tests or "latency" in o.tests
        if not wanted:
            return
        missing = self.onstream_missing()
        if missing:
            self.add(Row("gshmem", "put", "on_stream", "GB/s", None, note=missing))
            return
        try:
            if "onstream_bw" in o.tests:
                for direction in o.directions:
                    for op in ("put", "get"):
                        for size in sizes:
                            self.onstream_bw(direction, op, size)
            if "latency" in o.tests:
                for size in o.latency_sizes:
                    self.onstream_pingpong(size)
        except BenchError:
            raise
        except Exception as e:  # noqa: BLE001 - an API mismatch is reported, the suite goes on
            self.wait("after an on-stream error")
            self.comm.barrier()
            self.add(Row("gshmem", "put", "on_stream", "GB/s", None,
                         note=f"error: {type(e).__name__}: {e}"))  # fmt: skip

    def run_copy_engine(self, sizes: list[int]) -> None:
        torch = self.torch
        if not self.paired:
            return
        peer_dev = self.devices[self.peer]
        if peer_dev == self.device or not torch.cuda.can_device_access_peer(self.device, peer_dev):
            self.add(
                Row(
                    "copy_engine",
                    "-",
                    "host",
                    "GB/s",
                    None,
                    note=f"no peer access from GPU {self.device} to GPU {peer_dev}",
                )
            )
            return
        remote = torch.empty((self.cap,), dtype=torch.uint8, device=f"cuda:{peer_dev}")
        remote.copy_(self.random(4321 + self.rank, self.cap).to(f"cuda:{peer_dev}"))
        local = self.random(5678 + self.rank, self.cap)
        for direction in self.o.directions:
            for op in ("put", "get"):
                for size in sizes:
                    self.copy_engine(direction, op, size, remote, local)
        del remote, local
        torch.cuda.empty_cache()

    def run_nccl(self, sizes: list[int]) -> None:
        torch = self.torch
        import torch.distributed as dist

        why = self.nccl_init()
        if why:
            self.add(Row("nccl", "put", "host", "GB/s", None, note=why))
            return
        send = self.random(777 + self.rank, self.cap)
        expect = self.random(777 + self.peer, self.cap) if self.paired else send
        recv = torch.empty_like(send)
        try:
            for direction in self.o.directions:
                for size in sizes:
                    self.nccl(direction, size, send, recv, expect)
        except BenchError:
            raise
        except Exception as e:  # noqa: BLE001 - NCCL refused (e.g. two ranks on one GPU): a note
            first = next((ln for ln in str(e).splitlines() if "Duplicate GPU" in ln), str(e))
            self.add(Row("nccl", "put", "host", "GB/s", None,
                         note=f"NCCL failed: {first.strip()[:160]}"))  # fmt: skip
        self.sync("NCCL done")
        dist.destroy_process_group()
        del send, expect, recv
        torch.cuda.empty_cache()


def _say(text: str) -> None:
    sys.stderr.write(f"gshmem.bench: {text}\n")
    sys.stderr.flush()


def default_json_path() -> Path:
    if os.environ.get("OUT"):
        return Path(os.environ["OUT"]) / "bench_p2p.json"
    return Path("results") / f"bench_p2p-{time.strftime('%Y%m%d-%H%M%S')}.json"


def finish(o: Options, rows: list[Row], meta: dict[str, Any]) -> None:
    """Rank 0: PERF lines (on request), the JSON file, then the table (printed last)."""
    from gshmem.bench import report

    if o.perf_lines:
        for r in rows:
            line = report.perf_line(r)
            if line:
                print(line)
    path = Path(o.json) if o.json else default_json_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(report.to_json(rows, meta, o.compare))
    print(f"gshmem.bench: results written to {path}")
    tls = os.environ.get("UCX_TLS", "UCX's choice of transports")
    path = f", every peer through the proxy (UCX: {tls})" if o.path == "proxy" else ""
    title = f"gshmem p2p on {meta.get('gpu', '?')} ({meta.get('nranks', '?')} PEs{path})"
    print()
    print(report.format_table(rows, o.compare, title=title), flush=True)


def run(o: Options) -> int:
    """Runs the suite on this PE of a launched job (collective); rank 0 prints the table and
    writes the JSON. Returns the exit code: 0, 1 (a measurement failed), 3 (no GPU / torch /
    CuPy)."""
    missing = proxy_env_missing(o.path)
    if missing:
        _say(missing)
        return 2
    import gshmem

    try:
        import cupy  # noqa: F401
        import torch
    except ImportError as e:
        _say(f"needs torch and CuPy on the GPU host: {e}")
        return 3
    if gshmem.device_count() == 0 or not torch.cuda.is_available():
        _say("no CUDA GPU is visible to this process; run it on a GPU host")
        return 3
    started = time.monotonic()
    comm = gshmem.init()
    if comm.nranks < 2:
        _say(f"needs at least 2 PEs, this job has {comm.nranks}")
        comm.finalize()
        return 2
    try:
        bench = Bench(comm, o)
        bench.run_all()
        rows = list(bench.rows)
        meta = {
            "gpu": bench.gpu, "sms": bench.sms, "nranks": comm.nranks, "devices": bench.devices,
            "path": o.path,
            "torch": torch.__version__, "command": " ".join(sys.argv),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S"), "options": o.__dict__,
        }  # fmt: skip
        try:
            meta["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
        except Exception:  # noqa: BLE001 - informational only
            pass
        devices = bench.devices
        bench.sync("end of the suite")
        del bench
        torch.cuda.empty_cache()
    except BaseException as e:
        _say(f"rank {comm.rank}: {type(e).__name__}: {e}")
        comm.abort()
        return 1
    comm.finalize()
    if comm.rank == 0:
        if "nvshmem" in o.compare:
            # Leave 15 s of the launcher's --timeout for the table and the JSON.
            left = lambda: o.timeout - 15 - (time.monotonic() - started)  # noqa: E731
            say = lambda s: print(f"gshmem.bench: {s}", flush=True)  # noqa: E731
            rows += nvshmem_rows(o, devices, say, left)
        finish(o, rows, meta)
    return 0


__all__ = ["BenchError", "run"]
