"""Options of ``python -m gshmem.bench p2p``: NVSHMEM perftest's flags (``-b -e -f -n -w -c -t``)
plus suite selection, and the size/iteration arithmetic every PE derives from them."""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from gshmem import _C
from gshmem._errors import UsageError
from gshmem.bench.report import BASELINES

SCOPES = ("thread", "warp", "block")
TESTS = ("device_bw", "onstream_bw", "rate", "latency")
PATHS = ("direct", "proxy")
# What a job on the proxy path needs in its environment (docs/network.md): every peer through
# the proxy, CUDA modules loaded eagerly, and NCCL kept off NVLink and shared memory so that
# --compare nccl measures its network path.
PROXY_ENV = {
    "GSHMEM_TRANSPORT": "proxy",
    "CUDA_MODULE_LOADING": "EAGER",
    "NCCL_P2P_DISABLE": "1",
    "NCCL_SHM_DISABLE": "1",
}
PATH_HELP = (
    "direct: loads, stores and copy engines to every peer (default); proxy: every peer through "
    "the proxy and UCX (GSHMEM_TRANSPORT=proxy), and --compare nccl then measures NCCL's "
    "network path (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1)"
)


def proxy_env_missing(path: str) -> str:
    """'' when a rank of a launched job on `path` has the environment it needs; else what to
    set (the launcher sets PROXY_ENV; a job launched by hand must)."""
    wrong = {k: v for k, v in PROXY_ENV.items() if path == "proxy" and os.environ.get(k) != v}
    if not wrong:
        return ""
    needed = " ".join(f"{k}={v}" for k, v in wrong.items())
    return f"--path proxy inside a launched job needs {needed} in every rank's environment"


# (CTAs, threads) of the proxy path's thread- and warp-scope rows: every thread or warp posts its
# own descriptor there, so 32 x 1024 threads (the direct path's row) measure the proxy thread's
# descriptor rate ~30000 times per launch, not the link; the rate rows take this shape too.
PROXY_CONFIG = (4, 128)
ROTATE_BYTES = 256 << 20  # rotate slots until a buffer spans this much (> 4 x the 50-60 MB L2)
MAX_SLOTS = 256
MIN_BYTES_PER_REPEAT = 256 << 20
MAX_ITERS_PER_REPEAT = 10000


@dataclass
class Options:
    """What to measure. Sizes in bytes; ``ctas``/``threads`` None means the default configs."""

    min_size: int = 1 << 20
    max_size: int = 256 << 20
    factor: int = 2
    iters: int = 20
    warmup: int = 5
    repeats: int = 5
    ctas: list[int] | None = None
    threads: list[int] | None = None
    scopes: list[str] = field(default_factory=lambda: list(SCOPES))
    directions: list[str] = field(default_factory=lambda: ["uni", "bidir"])
    tests: list[str] = field(default_factory=lambda: list(TESTS))
    compare: list[str] = field(default_factory=list)
    json: str | None = None
    perf_lines: bool = False
    quick: bool = False
    nprocs: int = 2
    path: str = "direct"
    timeout: float = 1500.0
    latency_sizes: list[int] = field(default_factory=lambda: [8, 1024])
    latency_iters: int = 1000
    rate_iters: int = 200

    def sizes(self) -> list[int]:
        return size_range(self.min_size, self.max_size, self.factor)

    def configs(self, scope: str) -> list[tuple[int, int]]:
        """(CTAs, threads) pairs for a bandwidth row of ``scope``."""
        if self.ctas or self.threads:
            ctas = self.ctas or [32]
            threads = self.threads or [1024]
            return [(c, t) for c in ctas for t in threads]
        if self.path == "proxy" and scope != "block":
            return [PROXY_CONFIG]
        if scope == "block":
            return (
                [(8, 1024), (32, 1024)]
                if self.quick
                else [(4, 1024), (8, 1024), (16, 1024), (32, 1024), (132, 512)]
            )
        return [(32, 1024)]

    def rate_configs(self) -> list[tuple[int, int]]:
        """(CTAs, threads) pairs for the message-rate rows."""
        # Through the proxy every operation is a descriptor (a round trip for a fetch): a few
        # threads, whatever -c/-t ask of the bandwidth rows (8 x 1024 outran a minute's wait).
        if self.path == "proxy":
            return [PROXY_CONFIG]
        if self.ctas or self.threads:
            return self.configs("block")
        return [(32, 1024)] if self.quick else [(8, 1024), (32, 1024)]


def parse_size(text: str) -> int:
    """'8' -> 8, '64K' -> 65536, '1M'/'1MiB' -> 1048576, '2G' -> 2 << 30 (the runtime's size
    syntax, as in GSHMEM_HEAP_RESERVE); must be a positive whole number of bytes."""
    try:
        value = int(_C.parse_size(text))
    except UsageError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 8, 64K, 1M, 2G)") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"sizes must be positive, got {text!r}")
    return value


def size_range(min_size: int, max_size: int, factor: int) -> list[int]:
    """NVSHMEM perftest's sizes: min, min*f, ... while <= max."""
    if min_size <= 0 or max_size < min_size:
        raise ValueError(f"need 0 < -b <= -e, got -b {min_size} -e {max_size}")
    if factor < 2:
        raise ValueError(f"-f must be at least 2, got {factor}")
    sizes, s = [], min_size
    while s <= max_size:
        sizes.append(s)
        s *= factor
    return sizes


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"want comma-separated integers, got {text!r}") from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"want positive integers, got {text!r}")
    return values


def choices(text: str, allowed: Sequence[str], name: str) -> list[str]:
    """A comma list of names from `allowed` ("all" for every one); argparse error otherwise."""
    items = [v.strip() for v in text.split(",") if v.strip()]
    if items == ["all"]:
        return list(allowed)
    bad = [v for v in items if v not in allowed]
    if bad or not items:
        raise argparse.ArgumentTypeError(f"{name}: {bad or text!r} not in {', '.join(allowed)}")
    return items


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m gshmem.bench p2p",
        description="gshmem point-to-point benchmarks (NVSHMEM perftest options).",
    )
    a = p.add_argument
    a("-b", "--min-size", type=parse_size, default=None, help="smallest size (default 1M)")
    a("-e", "--max-size", type=parse_size, default=None, help="largest size (default 256M)")
    a("-f", "--step-factor", type=int, default=None, help="size multiplier (default 2)")
    a("-n", "--iters", type=int, default=None, help="timed iterations per repeat (default 20)")
    a("-w", "--warmup", type=int, default=None, help="warm-up iterations (default 5)")
    a("-c", "--ctas", type=_int_list, default=None, help="CTAs, e.g. 8 or 4,8,32")
    a("-t", "--threads", type=_int_list, default=None, help="threads per CTA, e.g. 1024")
    a("--repeats", type=int, default=None, help="timed repeats; the median is kept (default 5)")
    a("--scope", default=None, help="thread|warp|block|all, or a comma list (default all; "
      "block with --path proxy --quick)")  # fmt: skip
    a("--dir", default=None, help="uni|bidir|all (default all; uni with --path proxy --quick)")
    a("--only", default="all", help=f"subset of {','.join(TESTS)} (default all)")
    a("--compare", default="", help="copy_engine,nccl,nvshmem or all (default none)")
    a(
        "--json",
        default=None,
        help="write the results here (default $OUT/bench_p2p.json when "
        "$OUT is set, else results/bench_p2p-<time>.json)",
    )
    a("--perf-lines", action="store_true", help="also print '&&&& PERF' lines")
    a("--quick", action="store_true", help="a short run (sizes 1M,16M,256M, fewer configs)")
    a("--np", type=int, default=2, help="PEs to launch when not already launched (default 2)")
    a("--path", choices=PATHS, default="direct", help=PATH_HELP)
    a(
        "--timeout",
        type=float,
        default=None,
        help="seconds before the launcher kills the job (default 1500; 170 with --quick)",
    )
    return p


def _given(value: int | None, default: int) -> int:
    return default if value is None else value


def parse_args(argv: Sequence[str]) -> Options:
    """Options from the command line; exits 2 with a usage message when it is wrong."""
    p = parser()
    ns = p.parse_args(list(argv))
    q = ns.quick
    try:
        # A quick run through the proxy keeps to what fits a short job: a descriptor per thread
        # or warp makes those rows the proxy's descriptor rate, which the rate rows measure.
        proxy_quick = q and ns.path == "proxy"
        scopes = choices(ns.scope or ("block" if proxy_quick else "all"), SCOPES, "--scope")
        dirs = choices(ns.dir or ("uni" if proxy_quick else "all"), ("uni", "bidir"), "--dir")
        tests = choices(ns.only, TESTS, "--only")
        compare = choices(ns.compare, BASELINES, "--compare") if ns.compare else []
    except argparse.ArgumentTypeError as e:
        p.error(str(e))
    o = Options(
        min_size=ns.min_size or (1 << 20),
        max_size=ns.max_size or (256 << 20),
        factor=_given(ns.step_factor, 16 if q else 2),
        iters=_given(ns.iters, 10 if q else 20),
        warmup=_given(ns.warmup, 2 if q else 5),
        repeats=_given(ns.repeats, 3 if q else 5),
        ctas=ns.ctas,
        threads=ns.threads,
        scopes=scopes,
        directions=dirs,
        tests=tests,
        compare=compare,
        json=ns.json,
        perf_lines=ns.perf_lines,
        quick=q,
        nprocs=ns.np,
        path=ns.path,
        timeout=ns.timeout or (170.0 if q else 1500.0),
        latency_iters=200 if q else 1000,
        rate_iters=50 if q else 200,
    )
    if o.nprocs < 2:
        p.error(f"--np must be at least 2 (point-to-point needs a peer), got {o.nprocs}")
    if o.iters < 1 or o.repeats < 1 or o.warmup < 0:
        p.error("-n and --repeats must be at least 1, -w at least 0")
    if o.threads and any(t % 32 or t > 1024 for t in o.threads):
        p.error(f"-t: threads per CTA must be multiples of 32 up to 1024, got {o.threads}")
    try:
        o.sizes()
    except ValueError as e:
        p.error(str(e))
    return o


def slots_for(size: int) -> int:
    """Buffer slots a size rotates through so the working set exceeds L2."""
    return max(1, min(MAX_SLOTS, math.ceil(ROTATE_BYTES / size)))


def iters_for(size: int, iters: int) -> int:
    """Timed iterations for a size: at least ``iters``, more for small sizes (>= 256 MiB)."""
    return max(iters, min(MAX_ITERS_PER_REPEAT, math.ceil(MIN_BYTES_PER_REPEAT / size)))


@contextmanager
def environment(env: dict[str, str]) -> Iterator[None]:
    """``env`` set in os.environ for the block, the previous values restored after (a bench's
    variant run with other settings, or a check forcing an algorithm)."""
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
