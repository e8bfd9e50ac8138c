"""``python -m gshmem.bench train``: the training step of the Llama 3 architecture
(gshmem.train) with context parallelism over every GPU, the seeds' measurement: step time and
model TFLOP/s per GPU (MaxText's count), averaged over steps 3 to ``--steps``; peak memory; JSON.
``--framework torch`` (FSDP2, one process per GPU) or ``jax`` (jit + shard_map, one process
driving every GPU). ``--backend`` picks the context parallelism: gshmem's ring on copy engines
(gshmem), the same ring over ``batch_isend_irecv`` in PyTorch and over ``jax.lax.ppermute`` in JAX
(nccl), or, in PyTorch, torch's built-in ``context_parallel`` (torch_cp: K/V all-gathered, dK/dV
by all-to-all, cuDNN SDPA, the sequence sharded by torch in the same zigzag layout;
bench/torch_cp.py)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from statistics import mean
from typing import Any

from gshmem.bench.options import parse_size

BACKENDS = ("gshmem", "nccl", "torch_cp")
FRAMEWORKS = ("torch", "jax")
DATA = ("synthetic", "text")
FIRST_TIMED_STEP = 3  # the seeds average steps 3-20


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m gshmem.bench train", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--seq", type=parse_size, default=parse_size("64K"), help="tokens per sequence")
    p.add_argument("--layers", type=int, default=32, help="decoder layers (Llama-3-8B: 32)")
    p.add_argument("--batch", type=int, default=1, help="sequences per step")
    p.add_argument("--steps", type=int, default=20, help="steps (timed: 3 to this)")
    p.add_argument("--backend", choices=BACKENDS, default="gshmem")
    p.add_argument("--framework", choices=FRAMEWORKS, default="torch")
    p.add_argument("--data", choices=DATA, default="synthetic",
                   help="synthetic repeated blocks (throughput), or text: Python's language "
                   "reference as UTF-8 bytes (the model's vocabulary becomes 256)")  # fmt: skip
    p.add_argument("--no-checkpoint", action="store_true", help="keep every block's activations")
    p.add_argument("--keep-attention", type=int, default=0, metavar="N",
                   help="the first N blocks recompute all but their attention in the backward "
                   "(its inputs and output stay: more memory, fewer FLOPs)")  # fmt: skip
    p.add_argument("--compile", action="store_true",
                   help="torch.compile each block's pieces around its attention (PyTorch; "
                   "Llama.compile_blocks)")  # fmt: skip
    p.add_argument("--np", dest="nprocs", type=int, default=None, help="GPUs (default: every one)")
    p.add_argument("--timeout", type=float, default=3600.0, help="launcher timeout, s")
    p.add_argument("--json", default=None, help="default $OUT/bench_train.json, else results/...")
    ns = p.parse_args(argv)
    if ns.steps < FIRST_TIMED_STEP or ns.layers < 1 or ns.batch < 1:
        p.error(f"--steps must be at least {FIRST_TIMED_STEP}; --layers and --batch positive")
    if ns.nprocs is None:
        from gshmem.bench.__main__ import gpu_count

        ns.nprocs = max(1, gpu_count())
    if ns.seq % (2 * ns.nprocs):
        p.error(f"--seq ({ns.seq}) must divide into 2 x {ns.nprocs} zigzag chunks")
    if ns.keep_attention and ns.no_checkpoint:
        p.error("--keep-attention selects which blocks keep their attention under activation "
                "checkpointing: drop --no-checkpoint")  # fmt: skip
    if not 0 <= ns.keep_attention <= ns.layers:
        p.error(f"--keep-attention must be between 0 and --layers ({ns.layers})")
    if ns.framework == "jax" and ns.backend == "torch_cp":
        p.error("--backend torch_cp is PyTorch's context parallelism: --framework torch")
    if ns.framework == "jax" and ns.compile:
        p.error("--compile is torch.compile: --framework torch (XLA compiles the JAX step)")
    if ns.framework == "jax":
        ns.layout = "one"  # one process drives every GPU: the bench command does not relaunch
    return ns


def summarize(step_seconds: Sequence[float], flops_per_step: float, gpus: int) -> dict[str, float]:
    """Mean step time over steps FIRST_TIMED_STEP.. (1-based) and model TFLOP/s per GPU."""
    timed = list(step_seconds[FIRST_TIMED_STEP - 1 :])
    if not timed:
        raise ValueError(f"no step from step {FIRST_TIMED_STEP} on to average")
    seconds = mean(timed)
    return {"step_s": seconds, "tflops_per_gpu": flops_per_step / gpus / seconds / 1e12}


def model_config(o: argparse.Namespace) -> Any:
    """Llama-3-8B with ``--layers`` decoder layers; a byte vocabulary for ``--data text``."""
    from gshmem.train.config import LLAMA3_8B
    from gshmem.train.text import BYTE_VOCAB

    cfg = LLAMA3_8B.with_layers(o.layers)
    return replace(cfg, vocab=BYTE_VOCAB) if o.data == "text" else cfg


def batches(o: argparse.Namespace, vocab: int) -> Iterator[tuple[Any, Any]]:
    """The (tokens, labels) stream of ``--data``, [batch, seq] each, the same on every rank."""
    from gshmem.train.data import repeated_blocks
    from gshmem.train.text import text_windows

    if o.data == "text":
        return text_windows(o.seq, o.batch, seed=0)
    return repeated_blocks(vocab, o.seq, o.batch, period=max(1, o.seq // 8), seed=0)


def progress(step: int, steps: int, seconds: float, loss: float) -> None:
    """One line per step on stderr as the run goes (a run stopped by its timeout still says how
    far it got and how long its steps took; the first includes compiling and allocating)."""
    print(f"gshmem.bench train: step {step}/{steps}: {seconds:.3f} s, loss {loss:.4f}",
          file=sys.stderr, flush=True)  # fmt: skip


def run_torch(o: argparse.Namespace, cfg: Any, data: Iterator[tuple[Any, Any]]) -> dict | None:
    """This rank's part of a PyTorch run of ``cfg`` on ``data`` (collective); rank 0 returns
    its losses, step seconds, GPUs and peak memory, the others None."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import gshmem
    from gshmem.attention import ring_attention
    from gshmem.bench.nccl_group import join_nccl
    from gshmem.bench.torch_cp import sharded_batch
    from gshmem.train.cp import shard_batch
    from gshmem.train.model import Llama, sdpa
    from gshmem.train.step import optimizer, shard_model, train_step

    comm = gshmem.init()
    world, me = comm.nranks, comm.rank
    why = join_nccl(me, world, comm.device)
    if why:
        raise RuntimeError(f"gshmem.bench train needs torch.distributed over NCCL (FSDP): {why}")
    torch.manual_seed(0)  # the same initial weights on every rank, before FSDP shards them
    mesh = init_device_mesh("cuda", (world,))  # FSDP's, and torch_cp's sequence split
    model = shard_model(Llama(cfg).cuda(), mesh)
    if o.compile:
        model.compile_blocks()
    opt = optimizer(model)

    def attend(q, k, v):
        return ring_attention(q, k, v, comm=comm, backend=o.backend)

    def step(t, y, pos, attention) -> float:
        return train_step(model, opt, t, y, pos, attention, checkpoint=not o.no_checkpoint,
                          keep_attention=o.keep_attention)  # fmt: skip

    losses, seconds = [], []
    for _ in range(o.steps):
        tokens, labels = (x.cuda() for x in next(data))
        with ExitStack() as inside:  # the batch is sharded before the clock starts
            if o.backend == "torch_cp":  # torch shards it entering its context, which must hold
                # the whole step (its SDPA patch)
                t, y, pos = inside.enter_context(sharded_batch(mesh, tokens, labels))
                inside.enter_context(sdpa_kernel(SDPBackend.CUDNN_ATTENTION))
                attention = sdpa
            else:
                (t, y, pos), attention = shard_batch(tokens, labels, world, me), attend
            torch.cuda.synchronize()
            start = time.perf_counter()
            losses.append(step(t, y, pos, attention))
            torch.cuda.synchronize()
            seconds.append(time.perf_counter() - start)
        if me == 0:
            progress(len(losses), o.steps, seconds[-1], losses[-1])
    peak = torch.tensor([torch.cuda.max_memory_allocated() / 2**30], device="cuda")
    dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    dist.barrier()
    dist.destroy_process_group()
    comm.finalize()
    if me:
        return None
    return {"framework": "torch", "gpus": world, "losses": losses, "seconds": seconds,
            "peak_gib": float(peak)}  # fmt: skip


def report(o: argparse.Namespace, run: dict) -> dict:
    """The printed line and the JSON row of a run (its losses, step seconds, GPUs, peak)."""
    from gshmem.train.flops import train_flops

    gpus, losses = run["gpus"], run["losses"]
    row = {"framework": run["framework"], "seq": o.seq, "layers": o.layers, "batch": o.batch,
           "data": o.data, "gpus": gpus, "cp": gpus, "backend": o.backend,
           "keep_attention": o.keep_attention, "compile": o.compile, "losses": losses,
           "step_seconds": run["seconds"], "peak_gib": run["peak_gib"],
           **summarize(run["seconds"], train_flops(model_config(o), o.batch, o.seq),
                       gpus)}  # fmt: skip
    print(f"gshmem.bench train ({row['framework']}): {o.seq} tokens, {o.layers} layers, "
          f"CP={gpus}, {o.backend}{', compiled' if o.compile else ''}, attention kept in "
          f"{o.keep_attention}: "
          f"{row['step_s']:.3f} s/step, {row['tflops_per_gpu']:.1f} "
          f"TFLOP/s per GPU, peak {row['peak_gib']:.1f} GiB, loss {losses[0]:.3f} -> "
          f"{losses[-1]:.3f}")  # fmt: skip
    out = o.json or os.path.join(os.environ.get("OUT", "results"), "bench_train.json")
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(row, indent=1))
    return row


def run(o: argparse.Namespace) -> int:
    cfg = model_config(o)
    data = batches(o, cfg.vocab)
    if o.framework == "jax":
        from gshmem.bench import train_jax

        result = train_jax.run(o, cfg, data, on_step=progress)
    else:
        result = run_torch(o, cfg, data)
    if result is not None:
        report(o, result)
    return 0


__all__ = [
    "batches", "model_config", "parse_args", "progress", "report", "run", "run_torch", "summarize"
]  # fmt: skip
