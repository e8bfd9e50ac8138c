"""The collective suite: ``python -m gshmem.bench coll [options]`` (DESIGN.md §7), in
nccl-tests' format: size, count, type, redop, time (us), algbw and busbw (GB/s) per collective,
with ``--compare nccl,torch_symm`` columns measured in the same run.

Sizes follow nccl-tests: ``size`` is the bytes of the larger buffer of one rank (all_reduce: the
buffer; all_gather: the gathered output; reduce_scatter and all_to_all: the input), ``count`` its
elements; algbw = size / time; busbw = algbw x nccl-tests' factor (report.bus_bandwidth). Times
are the median of ``--repeats``, each the slowest rank's mean over ``-n`` iterations; sizes up
to ``--graph-max`` run inside a CUDA graph (host launch cost excluded, as PERFORMANCE.md's
anchors). ``permute`` is a ring shift (every PE sends to the next and receives from the
previous; nccl-tests' sendrecv, bus factor 1). Baselines: ``nccl`` is torch.distributed's NCCL
(all_reduce, all_gather_into_tensor, reduce_scatter_tensor, all_to_all_single, and
batch_isend_irecv for the permute); ``torch_symm`` is torch SymmetricMemory's
one_shot/two_shot all-reduce (best of the two; all_reduce only), with multicast off.
``--path proxy`` runs the job with every peer through the proxy (GSHMEM_TRANSPORT=proxy): the
gshmem column is then the exchanges (docs/collectives.md), NCCL's its network path
(NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1), as ``bench p2p --path proxy``.

Options, the table and the JSON are pure Python (tests/cpu/test_bench_coll.py); ``run(opts)`` is
the GPU part every rank of a launched job calls (collective).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gshmem import _C
from gshmem.bench.nccl_group import join_nccl
from gshmem.bench.options import (
    PATH_HELP,
    PATHS,
    choices,
    parse_size,
    proxy_env_missing,
    size_range,
)
from gshmem.bench.report import Row, bus_bandwidth, fmt_value, median

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "permute")
BASELINES = ("nccl", "torch_symm")
DTYPES = {"float": 4, "half": 2, "bfloat16": 2, "int32": 4, "int64": 8}
REDUCING = ("all_reduce", "reduce_scatter")
BUFFERS = ("symmetric", "device")


@dataclass
class CollOptions:
    min_size: int = 8
    max_size: int = 256 << 20
    factor: int = 2
    iters: int = 20
    warmup: int = 5
    repeats: int = 5
    ops: list[str] = field(default_factory=lambda: list(OPS))
    dtype: str = "bfloat16"
    redop: str = "sum"
    compare: list[str] = field(default_factory=list)
    graph_max: int = 16 << 20
    buffers: str = "symmetric"  # gshmem's buffers: "symmetric" (comm.empty) or "device"
    json: str | None = None
    quick: bool = False
    nprocs: int = 4
    path: str = "direct"
    timeout: float = 1500.0

    def sizes(self) -> list[int]:
        return size_range(self.min_size, self.max_size, self.factor)


def count_for(op: str, size: int, dtype: str, nranks: int) -> int:
    """Elements of the larger buffer (nccl-tests' ``count``), rounded down so the per-rank
    blocks of all_gather, reduce_scatter and all_to_all are whole; at least one per rank."""
    n = max(size // DTYPES[dtype], 1)
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        n = max(n // nranks, 1) * nranks
    return n


def algbw(nbytes: int, seconds: float) -> float:
    """nccl-tests' algorithm bandwidth, GB/s (1e9 bytes)."""
    if seconds <= 0:
        raise ValueError(f"time must be positive, got {seconds}")
    return nbytes / seconds / 1e9


def make_row(
    impl: str,
    op: str,
    size: int,
    count: int,
    dtype: str,
    redop: str,
    seconds: float | None,
    nranks: int,
    algo: str = "",
    note: str = "",
) -> Row:
    """One measurement as a report.Row: value = time in us; extra holds count, type, redop,
    algbw and busbw (GB/s) and the algorithm that ran."""
    extra: dict[str, Any] = {
        "count": count, "type": dtype, "redop": redop if op in REDUCING else "none", "algo": algo,
    }  # fmt: skip
    value = None
    if seconds is not None:
        value = seconds * 1e6
        extra["algbw"] = algbw(size, seconds)
        bus_op = "sendrecv" if op == "permute" else op  # nccl-tests' name for a shift
        extra["busbw"] = bus_bandwidth(extra["algbw"], bus_op, nranks)
    return Row(impl, op, "on_stream", "us", value, size=size, note=note, extra=extra)


def format_table(rows: Sequence[Row], baselines: Sequence[str] = (), title: str = "") -> str:
    """nccl-tests' columns for every gshmem row, then per baseline its time, busbw and
    gshmem's speed-up (baseline time / gshmem time: > 1 means gshmem is faster)."""
    index = {(r.impl, r.op, r.size): r for r in rows}
    header = ["op", "size", "count", "type", "redop", "time(us)", "algbw", "busbw", "algo"]
    for b in baselines:
        header += [f"{b} us", f"{b} busbw", f"x{b}"]
    lines = []
    for r in rows:
        if r.impl != "gshmem":
            continue
        e = r.extra
        cells = [r.op, str(r.size), str(e.get("count", "")), e.get("type", ""),
                 e.get("redop", ""), fmt_value(r.value), fmt_value(e.get("algbw")),
                 fmt_value(e.get("busbw")),
                 e.get("algo", "") or r.note]  # fmt: skip
        for b in baselines:
            base = index.get((b, r.op, r.size))
            if base is None or base.value is None:
                cells += ["-", "-", "-"]
                continue
            speedup = base.value / r.value if r.value else None
            cells += [fmt_value(base.value), fmt_value(base.extra.get("busbw")),
                      "-" if speedup is None else f"{speedup:.2f}"]  # fmt: skip
        lines.append(cells)
    widths = [max(len(h), *(len(c[i]) for c in lines)) if lines else len(h)
              for i, h in enumerate(header)]  # fmt: skip
    out = [title] if title else []
    out.append("  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True)))
    for cells in lines:
        out.append("  ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True)))
    if baselines:
        out.append("x<baseline>: baseline time / gshmem time (> 1: gshmem faster); GB/s = 1e9 B/s")
    notes = sorted({f"{r.impl} {r.op}: {r.note}" for r in rows
                    if r.impl != "gshmem" and r.value is None and r.note})  # fmt: skip
    out += notes
    return "\n".join(out)


# -- options --------------------------------------------------------------------------------------
def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m gshmem.bench coll",
                                description="gshmem collectives (nccl-tests columns).")  # fmt: skip
    a = p.add_argument
    a("-b", "--minbytes", type=parse_size, default=None, help="smallest size (default 8)")
    a("-e", "--maxbytes", type=parse_size, default=None, help="largest size (default 256M)")
    a("-f", "--stepfactor", type=int, default=None, help="size multiplier (default 2)")
    a("-n", "--iters", type=int, default=None, help="timed iterations per repeat (default 20)")
    a("-w", "--warmup_iters", type=int, default=None, help="warm-up iterations (default 5)")
    a("-d", "--datatype", default="bfloat16", help=f"{'|'.join(DTYPES)} (default bfloat16)")
    a("-o", "--op", default="sum", help="sum|prod|min|max (default sum)")
    a("--repeats", type=int, default=None, help="timed repeats; median kept (default 5)")
    a("--only", default="all", help=f"subset of {','.join(OPS)} (default all)")
    a("--compare", default="", help="nccl,torch_symm or all (default none)")
    a(
        "--graph-max",
        type=parse_size,
        default=16 << 20,
        help="largest size timed inside a CUDA graph (default 16M)",
    )
    a(
        "--buffers",
        choices=BUFFERS,
        default="symmetric",
        help="gshmem's input and output: symmetric (comm.empty: direct paths) or device (ordinary "
        "tensors: staged through the heap) (default symmetric)",
    )
    a(
        "--json",
        default=None,
        help="default $OUT/bench_coll.json, else results/bench_coll-<time>.json",
    )
    a("--quick", action="store_true", help="a short run (8 B .. 256 M by 16x, fewer iterations)")
    a("--np", type=int, default=4, help="PEs to launch when not already launched (default 4)")
    a("--path", choices=PATHS, default="direct", help=PATH_HELP)
    a("--timeout", type=float, default=None, help="launcher timeout, s (default 1500; 300 quick)")
    return p


def parse_args(argv: Sequence[str]) -> CollOptions:
    """Options from the command line; exits 2 with a usage message when it is wrong."""
    p = parser()
    ns = p.parse_args(list(argv))
    q = ns.quick
    try:
        ops = choices(ns.only, OPS, "--only")
        compare = choices(ns.compare, BASELINES, "--compare") if ns.compare else []
    except argparse.ArgumentTypeError as e:
        p.error(str(e))
    if ns.datatype not in DTYPES:
        p.error(f"-d: {ns.datatype!r} not in {', '.join(DTYPES)}")
    if ns.op not in ("sum", "prod", "min", "max"):
        p.error(f"-o: {ns.op!r} not in sum, prod, min, max")

    def given(v: int | None, default: int) -> int:
        return default if v is None else v

    o = CollOptions(
        min_size=ns.minbytes or 8, max_size=ns.maxbytes or (256 << 20),
        factor=given(ns.stepfactor, 16 if q else 2), iters=given(ns.iters, 10 if q else 20),
        warmup=given(ns.warmup_iters, 2 if q else 5), repeats=given(ns.repeats, 3 if q else 5),
        ops=ops, dtype=ns.datatype, redop=ns.op, compare=compare, graph_max=ns.graph_max,
        buffers=ns.buffers, json=ns.json, quick=q, nprocs=ns.np, path=ns.path,
        timeout=ns.timeout or (300.0 if q else 1500.0),
    )  # fmt: skip
    if o.nprocs < 2:
        p.error(f"--np must be at least 2, got {o.nprocs}")
    if o.iters < 1 or o.repeats < 1 or o.warmup < 0:
        p.error("-n and --repeats must be at least 1, -w at least 0")
    try:
        o.sizes()
    except ValueError as e:
        p.error(str(e))
    return o


# -- the GPU part ---------------------------------------------------------------------------------
class CollBench:
    """One PE's state (collective: every PE runs the same measurements in the same order)."""

    def __init__(self, comm: Any, o: CollOptions) -> None:
        import torch

        self.torch, self.comm, self.o = torch, comm, o
        self.rank, self.n, self.device = comm.rank, comm.nranks, comm.device
        torch.cuda.set_device(self.device)
        self.stream = torch.cuda.Stream(self.device)
        torch.cuda.set_stream(self.stream)
        self.dtype = {"float": torch.float32, "half": torch.float16, "bfloat16": torch.bfloat16,
                      "int32": torch.int32, "int64": torch.int64}[o.dtype]  # fmt: skip
        self.gpu = torch.cuda.get_device_name(self.device)
        self.rows: list[Row] = []
        self.box = comm.zeros((self.n,), torch.float64)
        cap = max(count_for(op, s, o.dtype, self.n) for op in o.ops for s in o.sizes())
        self.cap = cap
        if o.buffers == "symmetric":
            self.src = comm.empty((cap,), self.dtype)
            self.dst = comm.empty((cap,), self.dtype)
        else:
            self.src = torch.empty(cap, dtype=self.dtype, device=f"cuda:{self.device}")
            self.dst = torch.empty(cap, dtype=self.dtype, device=f"cuda:{self.device}")
        g = torch.Generator(device=f"cuda:{self.device}").manual_seed(99 + self.rank)
        if self.dtype.is_floating_point:
            self.src.copy_(torch.randn(cap, generator=g, device=self.src.device))
        else:
            self.src.copy_(torch.randint(-100, 100, (cap,), generator=g, device=self.src.device))
        self.sync()

    def sync(self) -> None:
        self.stream.synchronize()
        self.comm.barrier()

    def slowest(self, t: float | None) -> float | None:
        """The largest of every PE's ``t`` (collective). On-stream puts carry it, so it works
        on the direct and the proxy path alike."""
        mine = self.box[self.rank : self.rank + 1]
        mine.fill_(float("nan") if t is None else t)
        for q in range(self.n):
            if q != self.rank:
                self.comm.put(mine, mine, q)
        self.comm.quiet()
        self.sync()
        vals = [x for x in self.box.tolist() if not math.isnan(x)]
        self.comm.barrier()
        return max(vals) if vals else None

    def timed(self, fn: Callable[[], None], size: int) -> float:
        """Median over repeats of the mean seconds per call (graph replay up to --graph-max)."""
        torch, o = self.torch, self.o
        for _ in range(max(o.warmup, 1)):
            fn()
        run: Callable[[], None]
        if size <= o.graph_max:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=self.stream):
                for _ in range(o.iters):
                    fn()
            run = graph.replay
            per = o.iters
        else:

            def run() -> None:
                for _ in range(o.iters):
                    fn()

            per = o.iters
        self.sync()
        times = []
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for _ in range(o.repeats):
            self.comm.barrier()
            start.record(self.stream)
            run()
            stop.record(self.stream)
            stop.synchronize()
            times.append(start.elapsed_time(stop) / 1e3 / per)
        return median(times)

    def buffers(self, op: str, count: int) -> tuple[Any, Any]:
        n = self.n
        if op == "all_reduce":
            return self.src[:count], self.dst[:count]
        if op == "all_gather":
            return self.src[: count // n], self.dst[:count]
        if op == "reduce_scatter":
            return self.src[:count], self.dst[: count // n]
        return self.src[:count], self.dst[:count]

    def permute_path(self, size: int) -> str:
        """The path comm.permute takes for `size` bytes into this bench's outputs."""
        proxy = self.o.path == "proxy"
        path = _C.permute_path(size, self.o.buffers == "symmetric", proxy=proxy)
        return path.replace("_", " ") + (" / proxy" if proxy and path != "packets" else "")

    def ring(self) -> tuple[int, int]:
        """(the next PE, the previous PE): the permute's shift."""
        return (self.rank + 1) % self.n, (self.rank - 1) % self.n

    def gshmem_call(self, op: str, inp: Any, out: Any) -> Callable[[], None]:
        c, redop = self.comm, self.o.redop
        right, left = self.ring()
        return {
            "all_reduce": lambda: c.all_reduce(inp, op=redop, out=out),
            "all_gather": lambda: c.all_gather(inp, out=out),
            "reduce_scatter": lambda: c.reduce_scatter(inp, out=out, op=redop),
            "all_to_all": lambda: c.all_to_all(inp, out=out),
            "permute": lambda: c.permute(inp, right, left, out=out),
        }[op]

    def measure(
        self, impl: str, op: str, size: int, make: Callable[[Any, Any], Any], algo: str = ""
    ) -> None:
        count = count_for(op, size, self.o.dtype, self.n)
        inp, out = self.buffers(op, count)
        try:
            fn = make(inp, out)
            t = self.timed(fn, size) if fn is not None else None
            note = "" if fn is not None else "not offered for this op or dtype"
        except Exception as e:  # noqa: BLE001 - reported in the table, the suite goes on
            self.stream.synchronize()
            t, note = None, f"error: {type(e).__name__}: {e}"[:160]
        t = self.slowest(t)
        row = make_row(impl, op, count * self.src.element_size(), count, self.o.dtype,
                       self.o.redop, t, self.n, algo=algo, note=note)  # fmt: skip
        self.rows.append(row)
        if self.rank == 0:
            shown = "-" if row.value is None else f"{row.value:.2f} us"
            print(f"  {impl:10s} {op:14s} {row.size:>11d} B  {shown}  {note}", flush=True)

    def nccl_init(self) -> str:
        """Joins torch.distributed (NCCL) with this job's ranks; '' or why not (collective)."""
        return join_nccl(self.rank, self.n, self.device)

    def nccl_call(self, op: str) -> Callable[[Any, Any], Any]:
        import torch.distributed as dist

        rop = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT,
               "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX}[self.o.redop]  # fmt: skip
        right, left = self.ring()

        def shift(i: Any, o: Any) -> None:
            ops = [dist.P2POp(dist.isend, i, right), dist.P2POp(dist.irecv, o, left)]
            for work in dist.batch_isend_irecv(ops):
                work.wait()

        return {
            # in place on the output buffer (NCCL's all-reduce time does not depend on values)
            "all_reduce": lambda i, o: lambda: dist.all_reduce(o, op=rop),
            "all_gather": lambda i, o: lambda: dist.all_gather_into_tensor(o, i),
            "reduce_scatter": lambda i, o: lambda: dist.reduce_scatter_tensor(o, i, op=rop),
            "all_to_all": lambda i, o: lambda: dist.all_to_all_single(o, i),
            "permute": lambda i, o: lambda: shift(i, o),
        }[op]

    def symm_call(self) -> Callable[[Any, Any], Any] | None:
        """torch SymmetricMemory's best all-reduce (one_shot for small, two_shot for large)."""
        torch = self.torch
        ops = getattr(torch.ops, "symm_mem", None)
        if ops is None or self.o.redop != "sum":
            return None
        import torch.distributed as dist
        import torch.distributed._symmetric_memory as symm_mem

        group = dist.group.WORLD.group_name
        buf = symm_mem.empty(self.cap, dtype=self.dtype, device=f"cuda:{self.device}")
        symm_mem.rendezvous(buf, group)
        self._symm_buf = buf

        def make(inp: Any, out: Any) -> Callable[[], None]:
            b = buf[: inp.numel()]
            b.copy_(inp)
            if inp.numel() * inp.element_size() <= (256 << 10):
                return lambda: torch.ops.symm_mem.one_shot_all_reduce(b, "sum", group)
            return lambda: torch.ops.symm_mem.two_shot_all_reduce_(b, "sum", group)

        return make

    def algorithm(self, op: str, size: int) -> str:
        """What comm.explain says a team collective of ``size`` runs, or '' (informational)."""
        try:
            per_pe = size // (self.n if op == "all_gather" else 1)
            sym = self.o.buffers == "symmetric"  # inputs and outputs alike
            algo = self.comm.explain(op, per_pe, symmetric=sym, symmetric_input=sym)
            return algo.split(": ", 1)[1].split(" (")[0]
        except Exception:  # noqa: BLE001 - informational only
            return ""

    def run_all(self) -> None:
        o = self.o
        if self.rank == 0:
            print(f"gshmem.bench coll: {self.n} PEs, {self.gpu}, {o.dtype}, sizes "
                  f"{o.sizes()[0]}..{o.sizes()[-1]} B", flush=True)  # fmt: skip
        for op in o.ops:
            for size in o.sizes():
                algo = self.permute_path(size) if op == "permute" else self.algorithm(op, size)
                self.measure("gshmem", op, size, lambda i, out, op=op: self.gshmem_call(op, i, out),
                             algo=algo)  # fmt: skip
        if "nccl" in o.compare or "torch_symm" in o.compare:
            why = self.nccl_init()
            for op in o.ops:
                for size in o.sizes():
                    if "nccl" in o.compare:
                        if why:
                            self.rows.append(make_row("nccl", op, size, 0, o.dtype, o.redop, None,
                                                      self.n, note=why))  # fmt: skip
                        else:
                            self.measure("nccl", op, size, self.nccl_call(op))
            if "torch_symm" in o.compare and "all_reduce" in o.ops and not why:
                try:
                    make = self.symm_call()
                except Exception as e:  # noqa: BLE001
                    make, why = None, f"SymmetricMemory unavailable: {type(e).__name__}: {e}"
                for size in o.sizes():
                    if make is None:
                        note = why or "torch.ops.symm_mem unavailable"
                        self.rows.append(make_row("torch_symm", "all_reduce", size, 0, o.dtype,
                                                  o.redop, None, self.n, note=note))  # fmt: skip
                    else:
                        self.measure("torch_symm", "all_reduce", size, make)


def default_json_path() -> Path:
    if os.environ.get("OUT"):
        return Path(os.environ["OUT"]) / "bench_coll.json"
    return Path("results") / f"bench_coll-{time.strftime('%Y%m%d-%H%M%S')}.json"


def run(o: CollOptions) -> int:
    """Every rank of a launched job (collective). 0 done, 1 failed, 2 the proxy path's
    environment missing, 3 no GPU/torch."""
    missing = proxy_env_missing(o.path)
    if missing:
        sys.stderr.write(f"gshmem.bench: {missing}\n")
        return 2
    import gshmem
    from gshmem.bench import report

    try:
        import torch
    except ImportError as e:
        sys.stderr.write(f"gshmem.bench: needs torch on the GPU host: {e}\n")
        return 3
    if gshmem.device_count() == 0 or not torch.cuda.is_available():
        sys.stderr.write("gshmem.bench: no CUDA GPU is visible to this process\n")
        return 3
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    comm = gshmem.init()
    try:
        # Lets the selector hand large sizes to NCCL, as users get; not on the proxy path, where
        # it would take every call (a team beyond reach prefers NCCL): there the gshmem column
        # is the exchanges through the proxy, and --compare nccl is NCCL's network path.
        if o.path != "proxy":
            try:
                comm.enable_nccl()
            except gshmem.UsageError as e:
                if comm.rank == 0:
                    print(f"gshmem.bench: NCCL backend off: {str(e).splitlines()[0]}", flush=True)
        bench = CollBench(comm, o)
        bench.run_all()
        rows = list(bench.rows)
        meta = {"gpu": bench.gpu, "nranks": comm.nranks, "torch": torch.__version__,
                "command": " ".join(sys.argv), "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
                "options": o.__dict__}  # fmt: skip
        bench.sync()
        del bench
    except BaseException as e:
        sys.stderr.write(f"gshmem.bench: rank {comm.rank}: {type(e).__name__}: {e}\n")
        comm.abort()
        return 1
    comm.finalize()
    if comm.rank == 0:
        path = Path(o.json) if o.json else default_json_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(report.to_json(rows, meta, (), suite="coll"))
        print(f"gshmem.bench: results written to {path}\n")
        path = ", every peer through the proxy" if o.path == "proxy" else ""
        title = (f"gshmem coll on {meta['gpu']} ({meta['nranks']} PEs, {o.dtype}, {o.redop}, "
                 f"{o.buffers} buffers{path})")  # fmt: skip
        print(format_table(rows, o.compare, title=title), flush=True)
    return 0


__all__ = ["BASELINES", "OPS", "CollOptions", "count_for", "format_table", "make_row",
           "parse_args", "run"]  # fmt: skip
