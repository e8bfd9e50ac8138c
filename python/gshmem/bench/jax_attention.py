"""The attention rows of ``python -m gshmem.bench jax``: gshmem.jax.ring_attention, causal
zigzag, forward+backward, Llama-3-8B heads (32 query / 8 KV heads, dim 128), bfloat16, in three
columns (COLUMNS): ``gshmem`` (``algorithm="auto"``, the permutes on gshmem and the all-gather
schedule's collectives by gshmem's backend rule), ``gshmem_ring`` (the ring forced) and ``xla``
(the same schedule as ``gshmem`` with every collective on XLA's, ``GSHMEM_JAX_BACKEND=xla``:
the comparison swaps only the transport), and against one device's attention on the whole
sequence divided by the devices (the ideal). Every attention call is cuDNN's
(``implementation="cudnn"``: JAX's default may fall back to XLA's, which materialises the
scores)."""

from __future__ import annotations

import time
from collections.abc import Callable
from statistics import median
from typing import Any

from gshmem.bench.options import environment
from gshmem.bench.timing import schedule

HQ, HKV, DIM = 32, 8, 128
CHAINED = 20  # most calls timed in a row
# column -> the environment it is traced under (read when ring_attention is traced)
COLUMNS = {
    "gshmem": {"GSHMEM_JAX_PPERMUTE_BACKEND": "gshmem"},
    "gshmem_ring": {"GSHMEM_JAX_PPERMUTE_BACKEND": "gshmem", "GSHMEM_ATTENTION_ALGORITHM": "ring"},
    "xla": {"GSHMEM_JAX_BACKEND": "xla"},
}


def flops_fwd_bwd(tokens: int) -> float:
    """Causal attention, forward + backward (3.5 x the forward's 4 B H S^2 D / 2)."""
    return 3.5 * 4 * HQ * tokens * tokens * DIM / 2


def _seconds(fn: Callable, args: tuple, warmup: int, repeats: int) -> float:
    """Median seconds per call of ``fn(*args)``, over repeats of up to CHAINED calls in a row
    (as a training loop issues them: the host's dispatch overlaps the GPU's work), sized from
    one timed call (timing.schedule)."""
    import jax

    jax.block_until_ready(fn(*args))  # compiles
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    warm, calls, reps = schedule(time.perf_counter() - t0, CHAINED, warmup, repeats)
    for _ in range(warm):
        jax.block_until_ready(fn(*args))
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(calls):
            out = fn(*args)
        jax.block_until_ready(out)
        times.append((time.perf_counter() - t0) / calls)
    return median(times)


def _ring_fwd_bwd(q, k, v, do):
    import jax

    from gshmem.jax.attention import ring_attention

    def attend(*qkv):
        return ring_attention(*qkv, "x", implementation="cudnn")

    return jax.vjp(attend, q, k, v)[1](do)


def _whole_fwd_bwd(q, k, v, do):
    import jax

    def attend(*qkv):
        return jax.nn.dot_product_attention(*qkv, is_causal=True, implementation="cudnn")

    return jax.vjp(attend, q, k, v)[1](do)


def measure(tokens_per_gpu: list[int], mesh: Any, warmup: int, repeats: int,
            slowest: Callable[[float], float]) -> list[dict]:  # fmt: skip
    """One row per size: seconds per forward+backward of each column, efficiencies."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from gshmem.jax.attention import shard

    n = mesh.size
    spec = P(None, "x")
    rows = []
    for tpg in tokens_per_gpu:
        seq = tpg * n
        ks = jax.random.split(jax.random.key(0), 4)
        full = [jax.random.normal(k, (1, seq, h, DIM), jnp.bfloat16)
                for k, h in zip(ks, (HQ, HKV, HKV, HQ), strict=True)]  # fmt: skip
        mine = [jax.device_put(shard(t, n), NamedSharding(mesh, spec)) for t in full]

        seconds = {}
        for column, env in COLUMNS.items():
            with environment(env):
                with jax.set_mesh(mesh):
                    fn = jax.jit(jax.shard_map(_ring_fwd_bwd, in_specs=spec, out_specs=spec,
                                               check_vma=False))  # fmt: skip
                    seconds[column] = slowest(_seconds(fn, tuple(mine), warmup, repeats))

        local = jax.local_devices()[0]
        on_one = [jax.device_put(t, local) for t in full]
        seconds["ideal"] = _seconds(jax.jit(_whole_fwd_bwd), tuple(on_one), warmup, repeats) / n
        per_gpu = flops_fwd_bwd(seq) / n
        row = {"op": "attention", "tokens_per_gpu": tpg}
        row.update({f"{col}_ms": sec * 1e3 for col, sec in seconds.items()})
        row.update({f"{col}_efficiency": seconds["ideal"] / seconds[col] for col in COLUMNS})
        row["gshmem_tflops"] = per_gpu / seconds["gshmem"] / 1e12
        rows.append(row)
    return rows


__all__ = ["COLUMNS", "flops_fwd_bwd", "measure"]
