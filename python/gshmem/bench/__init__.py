"""Benchmarks: ``python -m gshmem.bench <suite> [options]`` (DESIGN.md §7, docs/benchmarks.md).

Suites:
  p2p   point-to-point between 2 PEs: device put/get bandwidth (thread, warp and block scope,
        several CTA x thread configurations, one and both directions), on-stream (copy-engine)
        put/get bandwidth, p/g/atomic message rates, put-with-signal ping-pong latency (device
        and on-stream), with ``--compare`` baselines (copy-engine peer copies, NCCL send/recv,
        NVSHMEM) measured in the same run. Options follow NVSHMEM's perftest.
  coll  collectives (all_reduce, all_gather, reduce_scatter, all_to_all) in nccl-tests' format
        (size, count, type, redop, time, algbw, busbw), small sizes inside a CUDA graph, with
        ``--compare nccl,torch_symm`` measured in the same run (bench/coll.py).
  attention  context-parallel ring attention at Llama-3-8B heads, 1K-128K tokens per GPU and
        1M in all, causal zigzag and non-causal, forward and forward+backward: time, TFLOP/s
        per GPU and efficiency against single-GPU attention on the whole sequence, with the
        NCCL transport and torch's context_parallel in the same run (bench/attention.py).
  jax   gshmem.jax's ppermute/psum against jax.lax, and the JAX ring attention (bench/jax_suite.py).
  train the Llama 3 training step with context parallelism and FSDP2 (bench/train.py).
  moe   expert-parallel dispatch and combine at DeepSeek-V3 shapes against all_to_all_single
        over NCCL (bench/moe.py).

Run outside a launched job, the command re-launches itself as ``python -m gshmem.run -n 2
--timeout ...``; inside one (``python -m gshmem.run``, torchrun, MPI) every rank runs the suite.
It prints a table (last) and writes JSON (``--json``; default ``$OUT/bench_p2p.json``).
"""

from __future__ import annotations

SUITES = ("p2p", "coll", "attention", "jax", "train", "moe")

__all__ = ["SUITES"]
