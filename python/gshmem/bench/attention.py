"""The context-parallel attention suite: ``python -m gshmem.bench attention [options]``.

Ring attention at Llama-3-8B's attention shape (batch 1, 32 query heads, 8 KV heads, head dim
128, bf16) from 1K to 128K tokens per GPU, plus one sequence of ``--total`` tokens (1M) over all
W GPUs; causal (zigzag layout) and non-causal; forward and forward+backward. Columns measured in
the same run, on the same random data:

- ``ideal``: cuDNN SDPA on the whole sequence (S_total = tokens per GPU x W) on one GPU, time / W
  (every rank measures it on its own GPU at once; the slowest is kept). Left empty, with the reason,
  when the whole sequence does not fit on one GPU or one call would outlast ``--max-call-s``:
  nothing is extrapolated.
- ``gshmem`` / ``nccl``: ``gshmem.attention.ring_attention(backend=...)``: the same schedule
  (``algorithm="auto"``: all-gather or ring, printed per row and kept in the JSON), K/V (and
  dK/dV) moved by copy-engine puts (0 SMs) or by torch.distributed P2P (NCCL kernels).
- ``gshmem:ring`` (``--compare gshmem_ring``): gshmem with the ring schedule forced, to show
  what the schedule chosen by ``auto`` gains; ``gshmem:heads`` (``--compare gshmem_heads``)
  the head-parallel all-to-all schedule (``algorithm="heads"``).
- ``torch_cp:allgather`` / ``torch_cp:alltoall``: torch's context parallel
  (``torch.distributed.tensor.experimental.context_parallel`` over a 1-D DeviceMesh, head-tail
  load balancing, which is the zigzag layout, for causal; ``set_rotate_method``), cuDNN SDPA.

FLOPs (FlashAttention's benchmark convention): forward = 4·B·Hq·S_total²·D (two matmuls, 2 FLOPs
per multiply-add), halved when causal; forward+backward = 3.5 x forward (backward = 2.5 x
forward). TFLOP/s per GPU = FLOPs / W / time; efficiency = ideal time / column time (%).

Time: CUDA events around ``--iters`` calls after ``--warmup`` calls (the first gshmem call
allocates symmetric buffers, a collective, so it is always a warm-up call), median of
``--repeats``, slowest rank; long calls run fewer times (``schedule``). Check: a copy of each
column's first warm-up output (and gradients; ideal: this rank's zigzag shard of them) is
compared with the first column's (gshmem's by default): max |diff| <= 2e-2 x max(1, max |ref|).
nccl differing from gshmem fails the run (exit 1); any other difference is a note. Each row's
extra["check"] keeps the max |diff| of every output.

torch_cp: K/V stay at 8 heads (cuDNN takes GQA; K/V expanded to 32 heads, then flash attention,
are the noted fallbacks); ``_cp_options.enable_load_balance`` is set to ``causal`` for the call
(torch refuses load balancing without a causal mask), and non-causal inputs are laid out in
zigzag order so that every column holds the same tokens on each rank.

Options, FLOPs, the table, the JSON and the plot data are pure Python
(tests/cpu/test_bench_attention.py); ``run(opts)`` is the GPU part every rank runs (collective).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from gshmem.bench.nccl_group import join_nccl
from gshmem.bench.options import choices, parse_size
from gshmem.bench.report import Row, fmt_size, fmt_value, median
from gshmem.bench.timing import schedule
from gshmem.bench.torch_cp import ROTATE, context_parallel_shards

BATCH, HQ, HKV, HEAD_DIM = 1, 32, 8, 128  # Llama-3-8B attention, bf16
IMPLS = ("gshmem", "gshmem_ring", "gshmem_heads", "nccl", "torch_cp", "ideal")
GSHMEM_COLUMNS = ("gshmem", "gshmem:ring", "gshmem:heads")  # over gshmem's transport
RING_COLUMNS = (*GSHMEM_COLUMNS, "nccl")  # ring_attention's columns
MASKS = ("causal", "noncausal")
MODES = ("fwd", "fwdbwd")
FULL_TOKENS = tuple(1 << s for s in range(10, 18))  # 1K .. 128K per GPU
QUICK_TOKENS = (2 << 10, 8 << 10, 32 << 10)
TOL = 2e-2
ASSUMED_FLOPS = 400e12  # per GPU, only to plan iterations and --max-call-s
CHANNEL_VARS = ("NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_MAX_P2P_NCHANNELS")


@dataclass
class AttnOptions:
    tokens: list[int] = field(default_factory=lambda: list(FULL_TOKENS))
    total: int | None = 1 << 20
    masks: list[str] = field(default_factory=lambda: list(MASKS))
    modes: list[str] = field(default_factory=lambda: list(MODES))
    compare: list[str] = field(default_factory=lambda: list(IMPLS))
    iters: int = 20
    warmup: int = 3
    repeats: int = 5
    max_call_s: float = 60.0
    json: str | None = None
    plot: str | None = None
    quick: bool = False
    nprocs: int = 2
    timeout: float = 3600.0


def columns(compare: Sequence[str]) -> list[str]:
    """Table columns in measuring order: torch_cp gives one per rotate method."""
    out = [c for c in ("gshmem", "gshmem_ring", "gshmem_heads", "nccl") if c in compare]
    out = [c.replace("_", ":") for c in out]
    if "torch_cp" in compare:
        out += [f"torch_cp:{m}" for m in ROTATE]
    return out + (["ideal"] if "ideal" in compare else [])


def attention_flops(total: int, causal: bool, mode: str) -> float:
    """FLOPs of one call on the whole sequence (see the module docstring)."""
    f = 4.0 * BATCH * HQ * total * total * HEAD_DIM * (0.5 if causal else 1.0)
    return f * (3.5 if mode == "fwdbwd" else 1.0)


def tflops_per_gpu(flops: float, world: int, seconds: float) -> float:
    if seconds <= 0:
        raise ValueError(f"time must be positive, got {seconds}")
    return flops / world / seconds / 1e12


def ideal_bytes(total: int, mode: str) -> int:
    """GPU memory one single-GPU SDPA call needs: q, k, v, out; fwd+bwd adds grad_out, the
    three gradients and the fp32 log-sum-exp (cuDNN's workspace not counted)."""
    per_token = (2 * HQ + 2 * HKV) * HEAD_DIM * 2
    return total * (2 * per_token + HQ * 4 if mode == "fwdbwd" else per_token)


def plan_sizes(tokens: Sequence[int], total: int | None, world: int) -> tuple[list, list[str]]:
    """[(tokens per GPU, total tokens)] to measure, and why --total was dropped (if it was)."""
    plan = [(t, t * world) for t in tokens]
    notes = []
    if total:
        if total % (2 * world):
            notes.append(f"--total {total}: not a multiple of 2 x {world} GPUs; not measured")
        elif (total // world, total) not in plan:
            plan.append((total // world, total))
    return plan, notes


def comm_label(column: str, env: Mapping[str, str] | None = None) -> tuple[int | None, str]:
    """(SMs the communication occupies, or None when it is not known; what to print)."""
    if column.startswith("gshmem"):
        return 0, "0 (copy engine)"
    if column == "ideal":
        return None, "- (no communication)"
    e = os.environ if env is None else env
    chans = ", ".join(f"{k}={e[k]}" for k in CHANNEL_VARS if k in e)
    what = {"nccl": "send/recv", "torch_cp:allgather": "all_gather; dK/dV all_to_all",
            "torch_cp:alltoall": "all_to_all"}.get(column, "")  # fmt: skip
    return None, f"NCCL kernels ({what}{'; ' + chans if chans else ''})"


def make_row(column: str, tokens: int, total: int, world: int, causal: bool, mode: str,
             seconds: float | None, note: str = "", sched: tuple | None = None) -> Row:  # fmt: skip
    """One measurement: value = ms per call (``seconds`` is this column's time per call; the
    ideal's, on one GPU, is divided by ``world``); extra holds total, TFLOP/s per GPU, comm."""
    sms, comm = comm_label(column)
    extra: dict[str, Any] = {"total": total, "world": world, "causal": causal, "mode": mode,
                             "comm": comm, "schedule": list(sched or ())}  # fmt: skip
    value = None
    if seconds is not None:
        if column == "ideal":
            extra["single_gpu_ms"] = seconds * 1e3
            seconds /= world
        value = seconds * 1e3
        extra["tflops"] = tflops_per_gpu(attention_flops(total, causal, mode), world, seconds)
    path = "on_stream" if column in GSHMEM_COLUMNS else "-" if column == "ideal" else "host"
    op = f"{'causal' if causal else 'noncausal'}_{mode}"
    return Row(column, op, path, "ms", value, size=tokens, sms=sms, note=note,
               extra=extra)  # fmt: skip


def add_efficiency(rows: Sequence[Row]) -> None:
    """extra['eff'] = ideal time / row time x 100 where the ideal of the same size was measured."""
    ideal = {(r.op, r.extra["total"]): r.value for r in rows if r.impl == "ideal" and r.value}
    for r in rows:
        base = ideal.get((r.op, r.extra["total"]))
        if base and r.value:
            r.extra["eff"] = 100.0 * base / r.value


def check_close(diffs: Sequence[tuple[str, float, float]], tol: float = TOL) -> str:
    """'' when every (name, max |a - b|, max |ref|) has diff <= tol x max(1, max |ref|) (NaN
    fails); else what differs."""
    bad = [f"{n} {d:.3g}" for n, d, m in diffs if not d <= tol * max(1.0, m)]
    return f"max |diff| {', '.join(bad)} (> {tol:g} x max(1, |ref|))" if bad else ""


def _cell(r: Row | None) -> str:
    if r is None or r.value is None:
        return "-" + ("*" if r is not None and r.note else "")
    eff = r.extra.get("eff")
    text = f"{fmt_value(r.value)} / {fmt_value(r.extra.get('tflops'))}"
    return text + (f" / {eff:.0f}%" if eff is not None else "") + ("*" if r.note else "")


def format_table(rows: Sequence[Row], cols: Sequence[str], title: str = "") -> str:
    """One section per mask and pass; a line per size; a cell per column: ms / TFLOP/s per GPU /
    efficiency (* = see the notes). Then the comm SMs of each column and the notes."""
    add_efficiency(rows)
    index = {(r.impl, r.op, r.extra["total"]): r for r in rows}
    out = [title] if title else []
    for op in dict.fromkeys(r.op for r in rows):
        sizes = sorted({(r.extra["total"], r.size) for r in rows if r.op == op})
        header = ["tokens/GPU", "total", *cols]
        lines = [[fmt_size(per_gpu), fmt_size(total),
                  *(_cell(index.get((c, op, total))) for c in cols)]
                 for total, per_gpu in sizes]  # fmt: skip
        widths = [max([len(h), *(len(x[i]) for x in lines)]) for i, h in enumerate(header)]
        mask, mode = op.split("_")
        out.append(f"\n{mask}, {'forward+backward' if mode == 'fwdbwd' else 'forward'}: "
                   "ms / TFLOP/s per GPU / % of ideal")  # fmt: skip
        for cells in [header, *lines]:
            out.append("  ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True)))
    out.append("\ncomm SMs (the SMs the communication occupies):")
    out += [f"  {c}: {comm_label(c)[1]}" for c in cols]
    notes: dict[tuple[str, str], list[str]] = {}
    for r in rows:
        if r.note:
            notes.setdefault((r.impl, r.note), []).append(f"{fmt_size(r.size)} {r.op}")
    out += [f"* {c} [{', '.join(where)}]: {n}" for (c, n), where in notes.items()]
    return "\n".join(out)


def plot_series(rows: Sequence[Row], op: str = "causal_fwdbwd") -> dict[str, list[tuple]]:
    """Efficiency (%) against tokens per GPU for every non-ideal column, for one mask and pass."""
    add_efficiency(rows)
    series: dict[str, dict[int, float]] = {}
    for r in rows:
        if r.op == op and r.impl != "ideal":
            pts = series.setdefault(r.impl, {})
            if "eff" in r.extra:
                pts[r.size] = r.extra["eff"]
    return {c: sorted(p.items()) for c, p in series.items()}


def write_plot(series: Mapping[str, Sequence[tuple]], path: Path, title: str) -> str:
    """Draws the series (matplotlib, Agg); returns '' or why there is no plot."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed here: no plot"
    if not any(series.values()):
        return "no efficiency to plot (needs the ideal column and causal fwd+bwd)"
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for name, pts in series.items():
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
    ax.axhline(100.0, color="gray", linestyle="--", linewidth=1, label="ideal (1 GPU / W)")
    ax.set_xscale("log", base=2)
    ticks = sorted({p[0] for pts in series.values() for p in pts})
    ax.set_xticks(ticks, [fmt_size(t) for t in ticks])
    ax.set(xlabel="tokens per GPU", ylabel="efficiency vs ideal (%)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return ""


# -- options --------------------------------------------------------------------------------------
def _tokens(text: str) -> list[int]:
    if text.strip().lower() in ("none", "0", ""):
        return []
    values = [parse_size(v.strip()) for v in text.split(",") if v.strip()]
    if any(v % 2 for v in values):
        raise argparse.ArgumentTypeError(f"tokens per GPU must be even (2 zigzag chunks): {text}")
    return values


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m gshmem.bench attention", description="Context-parallel ring attention."
    )
    a = p.add_argument
    a("--tokens", type=_tokens, default=None, help="tokens per GPU, a list or none "
      "(default 1K,2K,...,128K; quick 2K,8K,32K)")  # fmt: skip
    a("--total", default=None, help="one more size: total tokens over all GPUs, or none "
      "(default 1M; quick none)")  # fmt: skip
    a("--causal", choices=("both", *MASKS), default=None, help="default both (quick causal)")
    a("--mode", choices=("both", *MODES), default="both", help="default both")
    a("--compare", default="all", help=f"subset of {','.join(IMPLS)} (default all)")
    a("--iters", type=int, default=None, help="most calls per repeat (default 20; quick 5)")
    a("--warmup", type=int, default=None, help="warm-up calls (default 3; quick 2)")
    a("--repeats", type=int, default=None, help="timed repeats, median kept (default 5; quick 3)")
    a("--max-call-s", type=float, default=60.0,
      help="skip a column whose one call would take longer (estimated; default 60)")  # fmt: skip
    a("--json", default=None, help="default $OUT/bench_attention.json, else results/...")
    a("--plot", default=None, help="efficiency plot (PNG; default: the JSON path, .png)")
    a("--quick", action="store_true", help="2K,8K,32K per GPU, causal, few iterations")
    a("--np", type=int, default=None, help="GPUs to launch on (default: every visible GPU)")
    a("--timeout", type=float, default=None, help="launcher timeout, s (default 3600; quick 480)")
    return p


def parse_args(argv: Sequence[str]) -> AttnOptions:
    """Options from the command line; exits 2 with a usage message when it is wrong."""
    from gshmem.bench.__main__ import gpu_count

    p = parser()
    ns = p.parse_args(list(argv))
    q = ns.quick
    try:
        compare = choices(ns.compare, IMPLS, "--compare")
        total_text = ns.total if ns.total is not None else ("none" if q else "1M")
        total = None if total_text.lower() in ("none", "0") else parse_size(total_text)
    except argparse.ArgumentTypeError as e:
        p.error(str(e))
    causal = ns.causal or ("causal" if q else "both")

    def given(v: int | None, full: int, quick: int) -> int:
        return v if v is not None else (quick if q else full)

    o = AttnOptions(
        tokens=ns.tokens if ns.tokens is not None else list(QUICK_TOKENS if q else FULL_TOKENS),
        total=total, masks=list(MASKS) if causal == "both" else [causal],
        modes=list(MODES) if ns.mode == "both" else [ns.mode], compare=compare,
        iters=given(ns.iters, 20, 5), warmup=given(ns.warmup, 3, 2),
        repeats=given(ns.repeats, 5, 3), max_call_s=ns.max_call_s, json=ns.json, plot=ns.plot,
        quick=q, nprocs=ns.np if ns.np is not None else max(2, gpu_count()),
        timeout=ns.timeout or (480.0 if q else 3600.0),
    )  # fmt: skip
    if o.nprocs < 2:
        p.error(f"--np must be at least 2, got {o.nprocs}")
    if o.iters < 1 or o.repeats < 1 or o.warmup < 0 or o.max_call_s <= 0:
        p.error("--iters, --repeats and --max-call-s must be positive, --warmup at least 0")
    if not o.tokens and not o.total:
        p.error("nothing to measure: --tokens none and --total none")
    return o


# -- the GPU part ---------------------------------------------------------------------------------
class Skip(Exception):
    """A column not run at this size (the message says why)."""


class AttnBench:
    """One rank's state (collective: every rank runs the same measurements in the same order)."""

    def __init__(self, comm: Any, o: AttnOptions) -> None:
        import torch

        self.torch, self.comm, self.o = torch, comm, o
        self.rank, self.world, self.device = comm.rank, comm.nranks, comm.device
        torch.cuda.set_device(self.device)
        self.gpu = torch.cuda.get_device_name(self.device)
        self.cols = columns(o.compare)
        self.rows: list[Row] = []
        self.failed = False
        self.box = comm.zeros((3,), torch.float32)
        self.nccl_why = join_nccl(self.rank, self.world, self.device) if self.cols != [
            "ideal"] else "not needed"  # fmt: skip
        self.mesh: Any = None
        self.ref: tuple | None = None  # the first column's outputs at the current size
        self.ref_col = ""
        self.notes: list[str] = []
        self.checked: dict[str, Any] = {}

    def sync(self) -> None:
        self.torch.cuda.synchronize(self.device)
        self.comm.barrier()

    def reduce_max(self, values: Sequence[float]) -> list[float]:
        """Element-wise max over the ranks (collective)."""
        self.torch.cuda.synchronize(self.device)
        padded = [*values, *[0.0] * (len(self.box) - len(values))]
        self.box.copy_(self.torch.tensor(padded, dtype=self.torch.float32))
        self.comm.all_reduce(self.box, op="max")
        self.torch.cuda.synchronize(self.device)
        return self.box.tolist()[: len(values)]

    def full(self, total: int) -> tuple:
        """q, k, v, grad_out of the whole sequence: the same on every rank (seeded by size)."""
        torch = self.torch
        gen = torch.Generator(device=f"cuda:{self.device}").manual_seed(7919 + total)
        dev, bf16 = f"cuda:{self.device}", torch.bfloat16
        return tuple(torch.randn((BATCH, h, total, HEAD_DIM), generator=gen, dtype=bf16, device=dev)
                     for h in (HQ, HKV, HKV, HQ))  # fmt: skip

    def shard(self, tensors: Sequence[Any], rank: int | None = None) -> tuple:
        """Each tensor's zigzag shard (sequence dim 2) of ``rank`` (default this rank)."""
        from gshmem.attention import zigzag_shard

        r = self.rank if rank is None else rank
        return tuple(zigzag_shard(x, self.world, r, dim=2) for x in tensors)

    def make_fn(self, attn: Callable, mode: str, q: Any, k: Any, v: Any, g: Any) -> Callable:
        """One call: forward (no autograd) or forward+backward; returns out (and dq, dk, dv)."""
        torch = self.torch
        if mode == "fwd":

            def fwd() -> tuple:
                with torch.no_grad():
                    return (attn(q, k, v),)

            return fwd
        leaves = [x.detach().requires_grad_() for x in (q, k, v)]

        def fwdbwd() -> tuple:
            out = attn(*leaves)
            return (out.detach(), *torch.autograd.grad(out, leaves, g))

        return fwdbwd

    def pick(self, mode: str, q: Any, k: Any, v: Any, g: Any, causal: bool, cp: bool) -> tuple:
        """(call, its first outputs) of the first SDPA variant that runs: cuDNN with GQA, cuDNN
        with K/V expanded to HQ heads, (torch_cp only) flash attention; a fallback is noted."""
        from torch.nn.attention import SDPBackend, sdpa_kernel

        F, errors = self.torch.nn.functional, []
        variants = [
            ("cuDNN", SDPBackend.CUDNN_ATTENTION, False),
            (f"cuDNN with K/V expanded to {HQ} heads", SDPBackend.CUDNN_ATTENTION, True),
        ]
        if cp:
            variants.append(("FLASH_ATTENTION", SDPBackend.FLASH_ATTENTION, False))  # fmt: skip
        for label, backend, expand in variants:
            kv = [x.repeat_interleave(HQ // HKV, dim=1) for x in (k, v)] if expand else [k, v]

            def attn(q: Any, k: Any, v: Any, backend: Any = backend, gqa: bool = not expand) -> Any:
                with sdpa_kernel(backend):  # F's attribute: context_parallel patches it
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                          enable_gqa=gqa)  # fmt: skip

            fn = self.make_fn(attn, mode, q, *kv, g)
            try:
                first = fn()
                self.torch.cuda.synchronize(self.device)
            except self.torch.cuda.OutOfMemoryError:
                raise
            except Exception as e:  # noqa: BLE001 - the next variant, reported if one runs
                errors.append(f"{label}: {_short(e)}")
                continue
            if errors:
                self.notes.append(f"ran {label} ({'; '.join(errors)})")
            return fn, first
        raise RuntimeError("; ".join(errors))

    @contextmanager
    def step(self, col: str, causal: bool, mode: str, local: tuple, total: int) -> Iterator:
        """Yields (the call to time, its first outputs or None) for one column; what it made
        is freed afterwards."""
        torch = self.torch
        if col not in ("ideal", *GSHMEM_COLUMNS) and self.nccl_why:
            raise Skip(f"torch.distributed with NCCL: {self.nccl_why}")
        if col in RING_COLUMNS:
            from gshmem.attention import ring_attention
            from gshmem.attention.algorithm import choose

            backend, _, algo = col.partition(":")
            q, k = local[0], local[1]
            self.algorithm = choose(algo or "auto", self.world, q.shape[2], False,
                                    2 * k.numel() * k.element_size(),
                                    heads=(q.shape[1], k.shape[1]))  # fmt: skip
            attn = partial(ring_attention, comm=self.comm, causal=causal, backend=backend,
                           algorithm=self.algorithm)  # fmt: skip
            yield self.make_fn(attn, mode, *local), None
        elif col == "ideal":
            free = torch.cuda.mem_get_info(self.device)[0]
            if ideal_bytes(total, mode) > 0.9 * free:
                raise Skip(f"the whole sequence ({fmt_size(total)} tokens) does not fit on one "
                           f"GPU: ~{ideal_bytes(total, mode) / 2**30:.0f} GiB needed, "
                           f"{free / 2**30:.0f} GiB free")  # fmt: skip
            yield self.pick(mode, *self.full(total), causal=causal, cp=False)
        else:
            yield from self.torch_cp(col.split(":")[1], causal, mode, total)

    def torch_cp(self, method: str, causal: bool, mode: str, total: int) -> Iterator:
        from torch.distributed.device_mesh import init_device_mesh

        if self.mesh is None:
            self.mesh = init_device_mesh("cuda", (self.world,))
        q, k, v, g = self.full(total)
        (g,) = self.shard([g])
        if not causal:  # no load balancing: contiguous shards of the zigzag-ordered sequence
            q, k, v = (self.torch.cat([self.shard([x], r)[0] for r in range(self.world)], dim=2)
                       for x in (q, k, v))  # fmt: skip
        # head-tail load balancing = zigzag; torch refuses it when not causal
        with context_parallel_shards(self.mesh, [q, k, v], [2, 2, 2], rotate=method,
                                     load_balance=causal):  # fmt: skip
            yield self.pick(mode, q, k, v, g, causal=causal, cp=True)

    def timed(self, fn: Callable, first: tuple | None, est_s: float) -> tuple[float, tuple, tuple]:
        """(median seconds per call, schedule, the first warm-up call's outputs); ``first``: the
        outputs of a call already made (it counts as the first warm-up call)."""
        torch = self.torch
        warm, iters, reps = schedule(est_s, self.o.iters, self.o.warmup, self.o.repeats)
        # a copy: the outputs must not alias buffers that later calls reuse
        first = tuple(x.clone() for x in (fn() if first is None else first))
        for _ in range(warm - 1):
            fn()
        start, stop = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        times = []
        for _ in range(reps):
            self.sync()
            start.record()
            for _ in range(iters):
                fn()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop) / 1e3 / iters)
        return median(times), (warm, iters, reps), first

    def compare(self, col: str, outs: tuple) -> float:
        """Keeps the first column's outputs as the reference, else compares with it (nccl's
        difference from gshmem's fails the run: returns 1.0; any other is noted)."""
        if self.ref is None:
            self.ref, self.ref_col = outs, col
            return 0.0
        try:
            # (with K/V expanded to HQ heads, dk and dv have other shapes: not compared)
            diffs = [(n, float((a - b).abs().max()), float(b.abs().max()))
                     for n, a, b in zip(("out", "dq", "dk", "dv"), outs, self.ref, strict=False)
                     if a.shape == b.shape]  # fmt: skip
        except Exception as e:  # noqa: BLE001 - the measurement stands
            self.notes.append(f"not compared with {self.ref_col}: {_short(e)}")
            return 0.0
        self.checked = {"vs": self.ref_col, **{n: d for n, d, _ in diffs}}
        why = check_close(diffs)
        if why:
            self.notes.append(f"output differs from {self.ref_col}'s: {why}")
        return float(bool(why) and (self.ref_col, col) == ("gshmem", "nccl"))

    def measure(self, col: str, tokens: int, total: int, causal: bool, mode: str, local: tuple):
        torch, o = self.torch, self.o
        self.notes, self.checked, t, sched, bad = [], {}, None, None, 0.0
        self.algorithm = None
        est = attention_flops(total, causal, mode) / (1 if col == "ideal" else self.world)
        est /= ASSUMED_FLOPS
        try:
            if est > o.max_call_s:
                raise Skip(f"not run: one call ~{est:.0f} s (estimated) > --max-call-s")
            with self.step(col, causal, mode, local, total) as (fn, first):
                t, sched, outs = self.timed(fn, first, est)
                bad = self.compare(col, self.shard(outs) if col == "ideal" else outs)
                del outs
        except Exception as e:  # noqa: BLE001 - reported in the table, the suite goes on
            t = None
            self.notes.append(_why(e, col, total, isinstance(e, torch.cuda.OutOfMemoryError)))
        gc.collect()
        torch.cuda.empty_cache()
        worst, failed, bad = self.reduce_max([t or 0.0, float(t is None), bad])
        if failed and t is not None:
            self.notes.append("failed on another rank")
        row = make_row(col, tokens, total, self.world, causal, mode, None if failed else worst,
                       note="; ".join(self.notes), sched=sched)  # fmt: skip
        row.extra["check"] = self.checked  # max |diff| of each output against ref_col's
        if self.algorithm:
            row.extra["algorithm"] = self.algorithm
        self.rows.append(row)
        if bad and "gshmem" in self.cols:
            self.failed = True
            g = next(r for r in reversed(self.rows) if r.impl == "gshmem")
            g.note = "; ".join(filter(None, [g.note, "CHECK FAILED: nccl's output differs"]))
        if self.rank == 0:
            v = row.value
            shown = "-" if v is None else f"{v:9.3f} ms {row.extra['tflops']:7.1f} TFLOP/s"
            algo = f"[{self.algorithm}]" if self.algorithm else ""
            line = f"  {fmt_size(tokens):>5}/GPU {row.op:16s} {col:19s} {shown} {algo} {row.note}"
            print(line[:400], flush=True)

    def run_all(self) -> list[str]:
        o = self.o
        plan, notes = plan_sizes(o.tokens, o.total, self.world)
        if self.rank == 0:
            print(f"gshmem.bench attention: {self.world} GPUs, {self.gpu}, columns "
                  f"{', '.join(self.cols)}", flush=True)  # fmt: skip
        for tokens, total in plan:
            local = self.shard(self.full(total)) if set(RING_COLUMNS) & set(self.cols) else ()
            for mask in o.masks:
                for mode in o.modes:
                    self.ref = None
                    for col in self.cols:
                        self.measure(col, tokens, total, mask == "causal", mode, local)
            self.ref = local = None
            gc.collect()
            self.torch.cuda.empty_cache()
            self.sync()
        if not {"gshmem", "nccl"} <= set(self.cols):
            notes.append("correctness check (gshmem vs nccl) not run: needs both columns")
        return notes


def _short(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:200]


def _why(e: BaseException, col: str, total: int, oom: bool) -> str:
    if isinstance(e, Skip):
        return str(e)
    if oom and col == "ideal":
        return f"the whole sequence ({fmt_size(total)} tokens) does not fit on one GPU: OOM"
    return f"error: {_short(e)}"


def default_json_path() -> Path:
    if os.environ.get("OUT"):
        return Path(os.environ["OUT"]) / "bench_attention.json"
    return Path("results") / f"bench_attention-{time.strftime('%Y%m%d-%H%M%S')}.json"


def write_results(o: AttnOptions, rows: list[Row], cols: list[str], meta: dict) -> None:
    """Rank 0: the JSON, the plot, then the table (last)."""
    from gshmem.bench import report

    title = (
        f"gshmem ring attention on {meta['gpu']} x {meta['nranks']} (B=1, {HQ}/{HKV} heads, D=128)"
    )
    meta["plot"] = series = plot_series(rows)
    path = Path(o.json) if o.json else default_json_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(report.to_json(rows, meta, (), suite="attention"))
    plot = Path(o.plot) if o.plot else path.with_suffix(".png")
    why = write_plot(series, plot, f"{title}\ncausal, forward+backward")
    print(f"gshmem.bench: results written to {path}" + (f"; {why}" if why else f", {plot}"))
    print(format_table(rows, cols, title=title), flush=True)
    for n in meta["notes"]:
        print(n)
    if meta["check_failed"]:
        print("gshmem.bench: CHECK FAILED: gshmem's output differs from nccl's", flush=True)


def run(o: AttnOptions) -> int:
    """Every rank of a launched job (collective). 0 done, 1 check failed or error, 3 no GPU.
    Rank 0 writes the results before the last barrier, so no rank exits before it is done."""
    import gshmem

    try:
        import torch
    except ImportError as e:
        sys.stderr.write(f"gshmem.bench: needs torch on the GPU host: {e}\n")
        return 3
    if gshmem.device_count() == 0 or not torch.cuda.is_available():
        sys.stderr.write("gshmem.bench: no CUDA GPU is visible to this process\n")
        return 3
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    comm = gshmem.init()
    try:
        bench = AttnBench(comm, o)
        notes = bench.run_all()
        failed = bench.reduce_max([float(bench.failed)])[0] > 0
        if comm.rank == 0:
            meta = {"gpu": bench.gpu, "nranks": comm.nranks, "torch": torch.__version__,
                    "cudnn": torch.backends.cudnn.version(), "command": " ".join(sys.argv),
                    "time": time.strftime("%Y-%m-%dT%H:%M:%S"), "options": o.__dict__,
                    "columns": bench.cols, "notes": notes, "check_failed": failed,
                    "shape": {"batch": BATCH, "q_heads": HQ, "kv_heads": HKV,
                              "head_dim": HEAD_DIM, "dtype": "bfloat16"},
                    "flops": "fwd 4*B*Hq*S^2*D (x0.5 if causal); fwd+bwd 3.5 x fwd"}  # fmt: skip
            write_results(o, bench.rows, bench.cols, meta)
        bench.sync()
        del bench
        gc.collect()  # nothing may keep the comm alive past finalize
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
    except BaseException as e:
        sys.stderr.write(f"gshmem.bench: rank {comm.rank}: {type(e).__name__}: {e}\n")
        comm.abort()
        return 1
    comm.finalize()
    return 1 if failed else 0


__all__ = ["IMPLS", "AttnOptions", "add_efficiency", "attention_flops", "check_close", "columns",
           "format_table", "make_row", "parse_args", "plan_sizes", "plot_series", "run",
           "schedule", "write_plot"]  # fmt: skip
