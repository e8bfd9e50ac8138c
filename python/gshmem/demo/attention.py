"""The context-parallel attention demo (``python -m gshmem.demo``): Llama-3-8B attention heads
(32 query, 8 key/value, head dim 128, bf16), causal, over every PE with the zigzag layout.

Each PE builds the same random full sequence, runs ring attention forward and backward on its
shard, checks output and gradients against cuDNN attention on the whole sequence on its own GPU,
then times the ring over gshmem (copy engines, zero SMs) and over NCCL, and prints the
efficiency of each: single-GPU time on the whole sequence / PEs / ring time.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import gshmem
from gshmem.attention import ring_attention, zigzag_shard
from gshmem.bench.nccl_group import join_nccl

TOKENS_PER_GPU = 16384
HEADS, KV_HEADS, DIM = 32, 8, 128


def timed(fn, iters: int = 10) -> float:
    """Median milliseconds of ``fn`` over ``iters`` runs after a warm-up."""
    fn()
    times = []
    for _ in range(iters):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return sorted(times)[len(times) // 2]


def fwd_bwd(attn, q, k, v, dout):
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    out = attn(*leaves)
    out.backward(dout)
    return [out.detach()] + [t.grad for t in leaves]


def worker() -> int:
    comm = gshmem.init()
    n, me, dev = comm.nranks, comm.rank, f"cuda:{comm.device}"
    why_not_nccl = join_nccl(me, n, comm.device)
    g = torch.Generator(device=dev).manual_seed(2026)
    seq = TOKENS_PER_GPU * n
    full = [torch.randn(1, h, seq, DIM, generator=g, device=dev, dtype=torch.bfloat16)
            for h in (HEADS, KV_HEADS, KV_HEADS, HEADS)]  # fmt: skip
    mine = [zigzag_shard(t, n, me) for t in full]

    def one_gpu(q, k, v):
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    def ring(backend):
        return lambda q, k, v: ring_attention(q, k, v, comm=comm, backend=backend)

    want = [zigzag_shard(t, n, me) for t in fwd_bwd(one_gpu, *full)]
    got = fwd_bwd(ring("gshmem"), *mine)
    errors = [(a.float() - b.float()).abs().max().item() for a, b in zip(got, want, strict=True)]
    ok = all(e < 0.1 for e in errors)  # bf16 outputs and gradients of O(1) magnitude

    results = {"one GPU / PEs": timed(lambda: fwd_bwd(one_gpu, *full)) / n}
    results["gshmem ring"] = timed(lambda: fwd_bwd(ring("gshmem"), *mine))
    if not why_not_nccl:
        results["NCCL ring"] = timed(lambda: fwd_bwd(ring("nccl"), *mine))
    torch.cuda.synchronize()
    comm.barrier()
    if me == 0:
        print(f"gshmem CP attention demo: {n} PE(s) on {torch.cuda.get_device_name(dev)}, "
              f"{seq} tokens ({TOKENS_PER_GPU} per GPU), causal zigzag, {HEADS}/{KV_HEADS} "
              f"heads, dim {DIM}, bf16, forward+backward", flush=True)  # fmt: skip
        names = ("out", "dq", "dk", "dv")
        print("max |ring - one GPU|: " + ", ".join(f"{a} {e:.3g}" for a, e in zip(names, errors,
              strict=True)) + ("  (verified)" if ok else "  MISMATCH"), flush=True)  # fmt: skip
        ideal = results["one GPU / PEs"]
        for name, ms in results.items():
            print(f"  {name:14s} {ms:8.3f} ms   efficiency {100 * ideal / ms:5.1f} %", flush=True)
        if why_not_nccl:
            print(f"  (NCCL ring not run: {why_not_nccl})", flush=True)
    if not why_not_nccl:
        torch.distributed.destroy_process_group()
    comm.finalize()
    return 0 if ok else 1
