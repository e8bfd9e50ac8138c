"""``python -m gshmem.bench jax``: gshmem.jax's ppermute and psum against jax.lax's (XLA's
collectives over NCCL), inside ``jax.jit`` + ``shard_map``, in the same run; in one process
driving every visible GPU (``--layout one``, JAX's one-host layout) or one process per GPU under
``jax.distributed`` (``--layout per-gpu``: relaunched through ``python -m gshmem.run``; the
slowest process's time counts).

Time per call: one jitted function chains ``--calls`` calls (unrolled: an XLA while loop costs
a host round trip per iteration), each one's output the next one's input (psum's chain starts
from zeros, which stay finite with nothing between the calls; until 2026-11-28 each psum was
scaled by 1/N, an XLA fusion of ~1 us per call in both columns); ``--inflight`` executions of it
are dispatched back to back, as a training loop dispatches its steps, and timed from the first
dispatch to the last one's ``block_until_ready`` after ``--warmup`` runs; the median of
``--repeats`` divided by the calls. With ``--inflight 1`` each execution's host work (XLA's
dispatch and its launch of the command buffer) adds to the GPU's instead of overlapping it.
ppermute sends every device's block to the next device of a ring. Before each size is timed,
one gshmem call on a probe input is checked against a host reference (jax_values.py); a wrong
value is printed and the run exits 1.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from statistics import median

from gshmem.bench import jax_values
from gshmem.bench.options import choices, parse_size, size_range
from gshmem.bench.report import fmt_size

OPS = ("ppermute", "psum", "attention")


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m gshmem.bench jax", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--ops", default="ppermute,psum,attention",
                   help="subset of ppermute,psum,attention")  # fmt: skip
    p.add_argument("--tokens", default="2K,8K,32K", help="attention: tokens per GPU, a list")
    p.add_argument("-b", "--minbytes", type=parse_size, default=8, help="smallest size per device")
    p.add_argument("-e", "--maxbytes", type=parse_size, default=parse_size("256M"), help="largest")
    p.add_argument("-f", "--factor", type=int, default=8, help="size step factor (default 8)")
    # 200: an execution's fixed host work (~100 us) costs < 1 us per call even where it does
    # not overlap the GPU's (--inflight 1)
    p.add_argument("--calls", type=int, default=200, help="calls chained in one jitted loop")
    p.add_argument("--inflight", type=int, default=4,
                   help="executions dispatched before waiting for the last")  # fmt: skip
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--layout", choices=("one", "per-gpu"), default="one",
                   help="one process for every GPU (default) or one process per GPU")  # fmt: skip
    p.add_argument("--np", dest="nprocs", type=int, default=None, help="GPUs (default: every one)")
    p.add_argument("--timeout", type=float, default=900, help="per-gpu launcher timeout, s")
    p.add_argument("--json", default=None, help="default $OUT/bench_jax.json, else results/...")
    ns = p.parse_args(argv)
    try:
        ns.ops = choices(ns.ops, OPS, "--ops")
        ns.tokens = [parse_size(t.strip()) for t in ns.tokens.split(",") if t.strip()]
    except argparse.ArgumentTypeError as e:
        p.error(str(e))
    if ns.calls < 1 or ns.repeats < 1 or ns.inflight < 1 or ns.warmup < 0:
        p.error("--calls, --inflight and --repeats must be positive, --warmup at least 0")
    if ns.nprocs is None:
        from gshmem.bench.__main__ import gpu_count

        ns.nprocs = gpu_count()
    return ns


def _per_gpu_init() -> None:
    """This process's part of a --layout per-gpu run (started by gshmem.run)."""
    import jax

    rank, world = int(os.environ["GSHMEM_RANK"]), int(os.environ["GSHMEM_WORLD_SIZE"])
    jax.distributed.initialize(f"127.0.0.1:{os.environ['GSHMEM_BENCH_PORT']}", world, rank,
                               local_device_ids=[rank])  # fmt: skip


def _process_max(value: float) -> float:
    """The largest of every process's ``value`` (a time: the call is done when the last one
    is; a count of wrong blocks: any process's makes the size wrong)."""
    import jax
    import numpy as np

    if jax.process_count() == 1:
        return value
    from jax.experimental import multihost_utils

    return float(np.max(multihost_utils.process_allgather(np.array([value]))))


def _timed(fn: Callable, x, warmup: int, repeats: int, calls: int, inflight: int) -> float:
    """Median seconds per chained call, ``inflight`` executions of ``calls`` calls in a row."""
    for _ in range(warmup):
        fn(x).block_until_ready()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inflight):
            out = fn(x)
        out.block_until_ready()
        times.append((time.perf_counter() - t0) / (calls * inflight))
    return median(times)


def run(o: argparse.Namespace) -> int:
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    import gshmem.jax as gj

    if o.layout == "per-gpu":
        _per_gpu_init()
    elif o.nprocs:  # one process: the first --np GPUs (before JAX's backend starts)
        jax.config.update("jax_cuda_visible_devices", ",".join(map(str, range(o.nprocs))))
    gj.init()
    say = print if jax.process_index() == 0 else (lambda *a, **k: None)
    devices = jax.devices()
    n = len(devices)
    mesh = Mesh(np.array(devices), ("x",))
    ring = [(i, (i + 1) % n) for i in range(n)]
    impls = {
        ("ppermute", "gshmem"): lambda a: gj.ppermute(a, "x", ring),
        ("ppermute", "xla"): lambda a: jax.lax.ppermute(a, "x", ring),
        ("psum", "gshmem"): lambda a: gj.psum(a, "x"),
        ("psum", "xla"): lambda a: jax.lax.psum(a, "x"),
    }
    rows = []
    layout = "one process" if o.layout == "one" else "one process per GPU"
    say(f"gshmem.bench jax: {n} x {devices[0].device_kind}, {layout}, jit + shard_map, "
          f"{o.calls} chained calls per execution, {o.inflight} executions in flight")  # fmt: skip
    comm_ops = [op for op in o.ops if op != "attention"]
    if comm_ops:
        say(f"{'op':9s} {'size':>8s} {'gshmem us':>10s} {'jax.lax us':>11s} {'ratio':>6s} "
              f"{'gshmem GB/s':>12s} {'jax.lax GB/s':>13s}  gshmem path")  # fmt: skip
    wrong_sizes = []
    for op in comm_ops:
        for size in size_range(o.minbytes, o.maxbytes, o.factor):
            count = max(1, size // 4)
            with jax.set_mesh(mesh):  # one call on the probe first (jax_values.py)
                once = jax.jit(jax.shard_map(impls[(op, "gshmem")], in_specs=P("x"),
                                             out_specs=P("x"), check_vma=False))  # fmt: skip
                wrong = jax_values.wrong_blocks(op, once(jax_values.probe(mesh, count)), n, count)
            if wrong:
                print(f"gshmem.bench jax: {op} of {fmt_size(count * 4)}: WRONG values on "
                      f"device block(s) {wrong} of process {jax.process_index()}")  # fmt: skip
            values_ok = _process_max(float(len(wrong))) == 0.0
            if not values_ok:
                wrong_sizes.append(f"{op} {fmt_size(count * 4)}")
            start = jnp.zeros if op == "psum" else jnp.ones  # psum's chain stays finite
            x = jax.device_put(start((n * count,), jnp.float32), NamedSharding(mesh, P("x")))
            seconds = {}
            for impl in ("gshmem", "xla"):
                body = impls[(op, impl)]

                def loop(a, body=body):
                    for _ in range(o.calls):
                        a = body(a)
                    return a

                with jax.set_mesh(mesh):
                    fn = jax.jit(
                        jax.shard_map(loop, in_specs=P("x"), out_specs=P("x"), check_vma=False)
                    )
                    seconds[impl] = _process_max(
                        _timed(fn, x, o.warmup, o.repeats, o.calls, o.inflight)
                    )
            g, xl = seconds["gshmem"], seconds["xla"]
            path = gj.explain(op, count * 4)
            rows.append({"op": op, "bytes": count * 4, "gshmem_us": g * 1e6, "xla_us": xl * 1e6,
                         "ratio": xl / g, "path": path, "values_ok": values_ok})  # fmt: skip
            nbytes = count * 4
            say(f"{op:9s} {fmt_size(nbytes):>8s} {g * 1e6:10.2f} {xl * 1e6:11.2f} {xl / g:6.2f} "
                  f"{nbytes / g / 1e9:12.2f} {nbytes / xl / 1e9:13.2f}  {path}"
                  f"{'' if values_ok else '  WRONG VALUES'}")  # fmt: skip
    if comm_ops:
        say("values: before each size, one gshmem call on a probe matched the host reference"
            if not wrong_sizes else f"values: WRONG at {', '.join(wrong_sizes)}")  # fmt: skip
    if "attention" in o.ops:
        from gshmem.bench import jax_attention

        say("attention: auto schedule (all-gather or ring), causal zigzag, fwd+bwd, 32/8 heads "
            f"x 128, bf16, up to {jax_attention.CHAINED} chained calls per timing; efficiency = "
            "one device on the whole sequence / devices / time")  # fmt: skip
        say(f"{'tokens/GPU':>10s} {'gshmem ms':>10s} {'gshmem ring ms':>15s} {'jax.lax ms':>11s} "
            f"{'ideal ms':>9s} {'gshmem eff':>11s} {'ring eff':>9s} {'jax.lax eff':>12s} "
            f"{'TFLOP/s':>8s}")  # fmt: skip
        for r in jax_attention.measure(o.tokens, mesh, o.warmup, o.repeats, _process_max):
            rows.append(r)
            say(f"{fmt_size(r['tokens_per_gpu']):>10s} {r['gshmem_ms']:10.3f} "
                f"{r['gshmem_ring_ms']:15.3f} {r['xla_ms']:11.3f} {r['ideal_ms']:9.3f} "
                f"{r['gshmem_efficiency']:11.1%} {r['gshmem_ring_efficiency']:9.1%} "
                f"{r['xla_efficiency']:12.1%} {r['gshmem_tflops']:8.1f}")  # fmt: skip
    if jax.process_index() == 0:
        out = o.json or os.path.join(os.environ.get("OUT", "results"), "bench_jax.json")
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps({"devices": n, "kind": devices[0].device_kind,
                                         "layout": layout, "rows": rows}, indent=1))  # fmt: skip
        say(f"gshmem.bench jax: results written to {out}")
    gj.finalize()
    return 1 if wrong_sizes else 0


__all__ = ["parse_args", "run"]
