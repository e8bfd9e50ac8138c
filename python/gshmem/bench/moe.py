"""``python -m gshmem.bench moe``: expert-parallel dispatch and combine with DeepSeek-V3 shapes
(hidden 7168, 256 experts, top-8, bf16) over every GPU: µs per call and GB/s per GPU counted as
DeepEP does (the bytes of the token rows a rank receives, itself included, over the call's
time), for gshmem.moe.Buffer (its high-throughput mode, also without host synchronisation and
returning token rows, and its low-latency mode up to 256
tokens: ``gshmem-ll``, timed as called and, ``ll+graph``, replayed from CUDA graphs, and
``ll-fp8+g``: the same graphed with FP8 dispatch) and, in the same run on the same routing, the
way PyTorch users do it over NCCL: counts exchanged with ``all_to_all_single`` and read on the
host, then the rows (and their top-k) with ``all_to_all_single``, the reverse for the combine.
Every combined output is checked against the first one's. The last column is the experts'
stand-in's time between the two calls (with ``gshmem-tokens`` it includes
``Buffer.reduce_pairs``, so its combine moves one row per (token, rank)). JSON next to the
table."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from pathlib import Path
from statistics import median
from typing import Any, NamedTuple

# gshmem: high throughput, its default combine (push below 4 ranks, pull from 4); gshmem-push,
# gshmem-pull: either combine; gshmem-nosync: the default given num_worst_rows (the received rows
# rounded up to 128), so no host synchronisation; gshmem-ll: the low-latency mode, up to 256 tokens
# gshmem-tokens: gshmem-nosync with token_rows (the receive buffer's rows and each pair's row
# there; the experts' stand-in gathers them, as a grouped GEMM would on load, and its step ends
# with Buffer.reduce_pairs: the combine then moves one row per (token, rank))
# torch-vdev: torch SymmetricMemory's all_to_all_vdev_2d over NVSHMEM (moe_torch_symm.py)
IMPLS = ("gshmem", "gshmem-push", "gshmem-pull", "gshmem-nosync", "gshmem-tokens", "gshmem-ll",
         "nccl", "torch-vdev")  # fmt: skip
COMBINE_OF = {"gshmem-push": "push", "gshmem-pull": "pull"}  # the others: Buffer's default
WORST_ROUND = 128


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m gshmem.bench moe", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--tokens", default="4096", help="tokens per GPU, comma-separated")
    p.add_argument("--hidden", type=int, default=7168)
    p.add_argument("--experts", type=int, default=256)
    p.add_argument("--topk", type=int, default=8)
    p.add_argument("--blocks", type=int, default=None,
                   help="thread blocks (SMs) of gshmem's kernels (default: Buffer's)")  # fmt: skip
    p.add_argument("--compare", default=",".join(IMPLS), help=f"of {','.join(IMPLS)}")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--np", dest="nprocs", type=int, default=None, help="GPUs (default: every one)")
    p.add_argument("--timeout", type=float, default=600.0, help="launcher timeout, s")
    p.add_argument("--json", default=None, help="default $OUT/bench_moe.json, else results/...")
    ns = p.parse_args(argv)
    ns.tokens = [int(t) for t in ns.tokens.split(",")]
    ns.compare = [c for c in ns.compare.split(",") if c]
    if not ns.compare or any(c not in IMPLS for c in ns.compare):
        p.error(f"--compare takes {', '.join(IMPLS)}")
    if ns.nprocs is None:
        from gshmem.bench.__main__ import gpu_count

        ns.nprocs = max(1, gpu_count())
    if ns.experts % ns.nprocs or ns.topk > ns.experts or min(ns.tokens) < 1:
        p.error("--experts must split over the GPUs, --topk <= --experts, --tokens positive")
    return ns


def routing_of(tokens: int, experts: int, k: int, seed: int):
    """Router-like choices: top-k of random scores (distinct experts), softmax weights."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    scores = torch.randn(tokens, experts, generator=g, device="cuda")
    top = scores.topk(k, dim=1)
    return top.indices, torch.softmax(top.values, dim=1)


class NcclMoe:
    """The same dispatch and combine with torch.distributed's all_to_all_single (NCCL)."""

    def __init__(self, world: int, me: int, experts: int) -> None:
        self.world, self.me, self.experts, self.per = world, me, experts, experts // world
        self.sms = None  # NCCL's own channels: not set by the caller

    def dispatch(self, x, idx, weights):
        import torch
        import torch.distributed as dist

        from gshmem.moe import arrange, routing

        plan = routing.plan(idx, self.experts, self.world)
        dest, token = plan.to_rank.t().nonzero(as_tuple=True)  # by destination, then token
        send_counts = plan.counts[: self.world].long()
        recv_counts = torch.empty_like(send_counts)
        dist.all_to_all_single(recv_counts, send_counts)
        ins, outs = send_counts.tolist(), recv_counts.tolist()  # the host synchronisation
        rows = sum(outs)
        k = idx.shape[1]
        here = (idx[token] // self.per) == dest[:, None]
        meta = torch.cat([torch.where(here, idx[token] % self.per, -1).float(),
                          torch.where(here, weights[token], 0.0)], 1)  # fmt: skip
        recv_x = x.new_empty(rows, x.shape[1])
        recv_meta = meta.new_empty(rows, 2 * k)
        dist.all_to_all_single(recv_x, x[token], outs, ins)
        dist.all_to_all_single(recv_meta, meta, outs, ins)
        local = recv_meta[:, :k].to(torch.int32)
        pairs = arrange.pairs(local, recv_meta[:, k:], self.per, int((local >= 0).sum()))
        state = (token, ins, outs, pairs, x.shape[0])
        return recv_x.index_select(0, pairs.row), state, pairs.per_expert.tolist()

    def combine(self, y, state):
        import torch
        import torch.distributed as dist

        from gshmem.moe import arrange

        token, ins, outs, pairs, tokens = state
        back = arrange.reduce_rows(y, pairs)
        sent_back = back.new_empty(sum(ins), back.shape[1])
        dist.all_to_all_single(sent_back, back, ins, outs)
        out = torch.zeros(tokens, y.shape[1], dtype=torch.float32, device=y.device)
        out.index_add_(0, token, sent_back.float())
        return out.to(y.dtype)

    def experts_done(self, y, state):
        return y


class TokenRows(NamedTuple):
    """A token_rows dispatch's received rows and each pair's row among them."""

    x: Any
    row: Any


class GshmemMoe:
    """gshmem.moe.Buffer behind the baseline's interface."""

    def __init__(self, buf) -> None:
        self.buf, self.sms = buf, buf.ctx.blocks

    worst: int | None = None  # num_worst_rows (gshmem-nosync, gshmem-tokens)
    token_rows = False

    def dispatch(self, x, idx, weights):
        d = self.buf.dispatch(x, idx, weights, num_worst_rows=self.worst,
                              token_rows=self.token_rows)  # fmt: skip
        return (TokenRows(d.x, d.row) if self.token_rows else d.x), d.handle, d.tokens_per_expert

    def experts_done(self, y, handle):
        """What the experts' step hands the combine: its outputs per pair, or (token_rows) each
        received row's weighted sum of them."""
        return self.buf.reduce_pairs(y, handle) if self.token_rows else y

    def combine(self, y, handle):
        return self.buf.combine(y, handle, token_rows=self.token_rows)


class GshmemLowLatencyMoe(GshmemMoe):
    """gshmem.moe.Buffer's low-latency mode: rows come as [local experts, slots, hidden] (with
    ``fp8``: as e4m3 rows and their scales)."""

    fp8 = False

    def dispatch(self, x, idx, weights):
        d = self.buf.low_latency_dispatch(x, idx, weights, use_fp8=self.fp8)
        return ((d.x, d.scales) if self.fp8 else d.x), d.handle, None

    def combine(self, y, handle):
        return self.buf.low_latency_combine(y, handle)


def make_side(impl: str, comm, o: argparse.Namespace, tokens: int, worst: int):
    from gshmem.bench import moe_torch_symm
    from gshmem.moe import Buffer

    if impl == "nccl":
        return NcclMoe(comm.nranks, comm.rank, o.experts)
    if impl == "torch-vdev":
        bound = rounded_up(worst, tokens * o.topk * comm.nranks)
        return moe_torch_symm.TorchSymmMoe(comm.nranks, o.experts, tokens, o.topk, o.hidden,
                                           bound)  # fmt: skip
    low = impl == "gshmem-ll"
    combine = COMBINE_OF.get(impl)
    buf = Buffer(comm, o.hidden, tokens, o.experts, blocks=o.blocks, low_latency=low,
                 combine=combine)  # fmt: skip
    if low:
        return GshmemLowLatencyMoe(buf)
    side = GshmemMoe(buf)
    side.token_rows = impl == "gshmem-tokens"
    if impl in ("gshmem-nosync", "gshmem-tokens"):
        side.worst = rounded_up(worst, buf.ctx.most_pairs())
    return side


def rounded_up(pairs: int, most: int) -> int:
    """A bound on the rows received: ``pairs`` rounded up to WORST_ROUND, at most ``most``."""
    return min(-(-pairs // WORST_ROUND) * WORST_ROUND, most)


def expert_outputs(rows, per_expert, scale, first):
    """The experts' stand-in: row x scale[e], bf16 (``per_expert`` None: the low-latency layout,
    one slab of rows per local expert; a tensor: rows padded past its sum, which stays on the
    GPU)."""
    import torch

    if isinstance(rows, TokenRows):  # each pair's row gathered, as an expert kernel would on load
        rows = rows.x.index_select(0, rows.row)
    if isinstance(rows, tuple):  # FP8: e4m3 rows and a scale per 128 elements
        values, scales = rows
        rows = values.float() * scales.repeat_interleave(values.shape[-1] // scales.shape[-1], -1)
    if per_expert is None:
        return (rows.float() * scale[first][:, None, None]).to(torch.bfloat16)
    counts = torch.as_tensor(per_expert, device="cuda")
    if torch.is_tensor(per_expert):  # padded: the rest of the rows as one more expert
        counts = torch.cat([counts, (rows.shape[0] - counts.sum()).view(1)])
        first = torch.cat([first, first[-1:]])
    e = torch.repeat_interleave(first, counts, output_size=rows.shape[0])
    return (rows.float() * scale[e][:, None]).to(torch.bfloat16)


# GPU cycles each round waits after the ranks' stream barrier (~0.5 ms at H200 clocks): the host
# queues the round meanwhile, so the timed calls start together on every GPU and the time is the
# GPU's, as in a model whose host runs ahead of its GPU (the dispatch follows the router's kernels).
# A call that synchronises with its host (the counts' copy) still has that host time inside it.
HOST_AHEAD_CYCLES = 1_000_000


def align_ranks(comm) -> None:
    """Queue a barrier over every rank on the current stream, then a GPU wait of
    HOST_AHEAD_CYCLES: every GPU leaves it together, with the next calls already queued."""
    import torch

    comm.barrier_on_stream()
    torch.cuda._sleep(HOST_AHEAD_CYCLES)


class Timed(NamedTuple):
    """Medians in seconds, and the last combine's result."""

    dispatch: float
    experts: float
    combine: float
    out: Any


def timed_rounds(dispatch, experts, combine, iters: int, warmup: int, align) -> Timed:
    """Timed over ``iters`` rounds after ``warmup``: ``align()``, then ``dispatch()``,
    ``experts(its result)``, ``combine(that)``, each timed with CUDA events (host work included
    where the GPU waits for it). ``align`` (``align_ranks``) starts every rank's dispatch
    together, as in a model running in lock-step, so the time does not include how late another
    process issued its round, nor, for calls that do not wait for their host, the host's time to
    issue them."""
    import torch

    t_d, t_e, t_c, out = [], [], [], None
    for i in range(warmup + iters):
        start, mid, begin, end = (torch.cuda.Event(enable_timing=True) for _ in range(4))
        align()
        start.record()
        sent = dispatch()
        mid.record()
        y = experts(sent)
        begin.record()
        out = combine(y)
        end.record()
        end.synchronize()
        if i >= warmup:
            t_d.append(start.elapsed_time(mid) / 1e3)
            t_e.append(mid.elapsed_time(begin) / 1e3)
            t_c.append(begin.elapsed_time(end) / 1e3)
    return Timed(median(t_d), median(t_e), median(t_c), out)


def measure(side, x, idx, weights, scale, me: int, per: int, iters: int, warmup: int, align):
    """timed_rounds of the side's calls as they are (eager)."""
    import torch

    first = torch.arange(per, device="cuda") + me * per
    return timed_rounds(
        lambda: side.dispatch(x, idx, weights),
        lambda sent: (side.experts_done(expert_outputs(sent[0], sent[2], scale, first), sent[1]),
                      sent[1]),
        lambda made: side.combine(*made),
        iters, warmup, align,
    )  # fmt: skip


def measure_graphed(side, x, idx, weights, scale, me: int, per: int, iters: int, warmup: int,
                    align):  # fmt: skip
    """As ``measure``, with dispatch, experts and combine each captured in a CUDA graph and
    replayed (how decoding runs them: no host work per call). Low-latency mode only."""
    import torch

    first = torch.arange(per, device="cuda") + me * per
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm up outside the capture
        rows, state, per_expert = side.dispatch(x, idx, weights)
        side.combine(expert_outputs(rows, per_expert, scale, first), state)
    torch.cuda.current_stream().wait_stream(stream)
    graphs = [torch.cuda.CUDAGraph() for _ in range(3)]
    with torch.cuda.graph(graphs[0]):
        rows, state, per_expert = side.dispatch(x, idx, weights)
    with torch.cuda.graph(graphs[1], pool=graphs[0].pool()):
        y = expert_outputs(rows, per_expert, scale, first)
    with torch.cuda.graph(graphs[2], pool=graphs[0].pool()):
        out = side.combine(y, state)
    timed = timed_rounds(graphs[0].replay, lambda _: graphs[1].replay(),
                         lambda _: graphs[2].replay(), iters, warmup, align)  # fmt: skip
    return timed._replace(out=out)


def run(o: argparse.Namespace) -> int:
    import torch
    import torch.distributed as dist

    import gshmem
    from gshmem.bench.moe_torch_symm import unavailable
    from gshmem.bench.nccl_group import join_nccl
    from gshmem.moe.low_latency import MAX_TOKENS as LOW_LATENCY_TOKENS

    comm = gshmem.init()
    world, me = comm.nranks, comm.rank
    why = join_nccl(me, world, comm.device)
    if why and "nccl" in o.compare:
        raise RuntimeError(f"gshmem.bench moe --compare nccl needs torch.distributed: {why}")
    no_vdev = why or unavailable(o.experts, world)
    if "torch-vdev" in o.compare and no_vdev:
        o.compare.remove("torch-vdev")
        if me == 0:
            print(f"gshmem.bench moe: no torch-vdev column: {no_vdev}")
    per = o.experts // world
    scale = torch.linspace(0.5, 2.0, o.experts, device="cuda")
    rows_out = []
    for tokens in o.tokens:
        x = torch.randn(tokens, o.hidden, device="cuda").to(torch.bfloat16)
        idx, weights = routing_of(tokens, o.experts, o.topk, 1 + me)
        rows, pairs = received(comm, idx, per)
        nbytes = float(rows) * o.hidden * 2  # DeepEP's accounting: the token rows received
        first = None
        for impl in o.compare:
            if impl == "gshmem-ll" and tokens > LOW_LATENCY_TOKENS:
                continue
            side = make_side(impl, comm, o, tokens, pairs)
            ways = [(impl, measure, False)]
            if impl == "gshmem-ll":
                ways += [("ll+graph", measure_graphed, False), ("ll-fp8+g", measure_graphed, True)]
            for name, way, fp8 in ways:
                side.fp8 = fp8
                td, te, tc, out = way(side, x, idx, weights, scale, me, per, o.iters, o.warmup,
                                      lambda: align_ranks(comm))  # fmt: skip
                first = out if first is None else first
                err = (out.float() - first.float()).abs().max().item() if out.numel() else 0.0
                tol = 0.1 if fp8 else 2e-2  # e4m3 keeps 3 mantissa bits
                if err > tol * max(first.float().abs().max().item(), 1.0):
                    raise RuntimeError(f"moe bench: {name}'s combine differs from the first "
                                       f"({err})")  # fmt: skip
                rows_out.append({"tokens": tokens, "impl": name, "gpus": world,
                                 "dispatch_us": td * 1e6, "experts_us": te * 1e6,
                                 "combine_us": tc * 1e6,
                                 "dispatch_gbps": nbytes / td / 1e9,
                                 "combine_gbps": nbytes / tc / 1e9, "sms": side.sms})  # fmt: skip
            del side
    if me == 0:
        print(f"gshmem.bench moe: {world} GPUs, hidden {o.hidden}, {o.experts} experts, "
              f"top-{o.topk}, bf16; per GPU (rank 0)")  # fmt: skip
        print(f"{'tokens':>7} {'impl':>9} {'dispatch us':>12} {'GB/s':>7} {'combine us':>11} "
              f"{'GB/s':>7} {'SMs':>4} {'experts us':>11}")  # fmt: skip
        for r in rows_out:
            print(f"{r['tokens']:>7} {r['impl']:>9} {r['dispatch_us']:>12.1f} "
                  f"{r['dispatch_gbps']:>7.1f} {r['combine_us']:>11.1f} {r['combine_gbps']:>7.1f} "
                  f"{r['sms'] if r['sms'] else '-':>4} {r['experts_us']:>11.1f}")  # fmt: skip
        path = o.json or os.path.join(os.environ.get("OUT", "results"), "bench_moe.json")
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(rows_out, indent=1))
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    comm.finalize()
    return 0


def sent_counts(idx, per: int, world: int):
    """``[2, world]`` int64: the token rows (one per token and rank it goes to) and the (token,
    expert) pairs that routing ``idx`` (-1: none) sends to each rank."""
    import torch

    dest = torch.where(idx >= 0, idx // per, world)  # [tokens, k]: a choice's rank, or none
    hits = torch.nn.functional.one_hot(dest, world + 1)[..., :world]  # [tokens, k, world]
    return torch.stack([hits.any(1).sum(0), hits.sum((0, 1))]).to(torch.int64)


def received(comm, idx, per: int) -> tuple[int, int]:
    """(token rows, pairs) this rank receives over every sender (collective: one all-gather)."""
    world = comm.nranks
    every = comm.all_gather(sent_counts(idx, per, world).flatten()).view(world, 2, world)
    rows, pairs = every[:, :, comm.rank].sum(0).tolist()
    return rows, pairs


__all__ = ["parse_args", "run", "sent_counts"]
