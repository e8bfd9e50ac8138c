"""The JAX rows of ``python -m gshmem.bench train``: the JAX model (gshmem.train.model_jax) in one
process driving every visible GPU (JAX's one-host layout), the sequence split over a ``cp`` mesh
axis for gshmem.jax.ring_attention inside ``shard_map``, parameters and AdamW states stored
sharded over the same axis, bf16 compute on fp32 master weights. ``--backend nccl`` runs the
same ring with its permutes on XLA's collective (GSHMEM_JAX_PPERMUTE_BACKEND=xla, read when
the step is traced): the comparison swaps only the transport."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

PERMUTE_BACKEND = {"gshmem": "gshmem", "nccl": "xla"}


def peak_gib(devices: Any) -> float:
    """The largest peak of bytes in use over ``devices`` (0 where JAX keeps no statistics)."""
    peaks = [(d.memory_stats() or {}).get("peak_bytes_in_use", 0) for d in devices]
    return max(peaks, default=0) / 2**30


def setup(cfg: Any, mesh: Any, opt: Any, seed: int = 0) -> tuple[Any, Any]:
    """(parameters, optimizer state) of ``cfg`` stored sharded over ``mesh``'s ``cp`` axis, made
    where they live: neither the fp32 model nor its AdamW moments ever sit whole on one device
    (a jitted ``zeros_like`` would put the moments on the first device: 60 GiB for the 8B)."""
    import jax

    from gshmem.train import model_jax, step_jax

    init = partial(model_jax.init, cfg)
    where = step_jax.shardings(jax.eval_shape(init, jax.random.key(seed)), mesh, "cp")
    params = jax.jit(init, out_shardings=where)(jax.random.key(seed))
    return params, opt[0](params)  # eager: each moment is placed as its parameter


def train(cfg: Any, mesh: Any, data: Iterator[tuple[Any, Any]], steps: int, *,
          checkpoint: bool = True, keep_attention: int = 0,
          implementation: str | None = "cudnn", compute_dtype: Any = "bfloat16", seed: int = 0,
          on_step: Callable[[int, int, float, float], None] | None = None,
          ) -> tuple[list[float], list[float]]:  # fmt: skip
    """(losses, seconds) of ``steps`` training steps on ``data``'s (tokens, labels) torch
    batches [B, S], each step timed from its inputs' hand-off to its loss on the host;
    ``on_step(step, steps, seconds, loss)`` after each."""
    import jax
    import jax.numpy as jnp

    from gshmem.jax.attention.layout import order
    from gshmem.train import step_jax

    n = mesh.shape["cp"]
    opt = step_jax.adamw()
    params, state = setup(cfg, mesh, opt, seed)
    step = step_jax.make_step(cfg, mesh, opt, implementation=implementation,
                              checkpoint=checkpoint, compute_dtype=compute_dtype,
                              keep_attention=keep_attention)  # fmt: skip
    index, positions = None, None
    losses, seconds = [], []
    for _ in range(steps):
        batch = next(data)
        if index is None:
            index = order(batch[0].shape[-1], n)
            positions = jnp.asarray(index, jnp.int32)
        tokens, labels = (jnp.asarray(x.numpy()[:, index]) for x in batch)
        jax.block_until_ready((tokens, labels))
        start = time.perf_counter()
        params, state, loss = step(params, state, tokens, labels, positions)
        losses.append(float(loss))
        seconds.append(time.perf_counter() - start)
        if on_step is not None:
            on_step(len(losses), steps, seconds[-1], losses[-1])
    return losses, seconds


def run(o: Any, cfg: Any, data: Iterator[tuple[Any, Any]],
        on_step: Callable[[int, int, float, float], None] | None = None) -> dict:  # fmt: skip
    """One JAX training run of ``cfg`` on ``data`` over every visible GPU: its losses, step
    seconds, GPUs and peak memory (the caller reports them; ``on_step`` as in ``train``)."""
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    # XLA's allocator may take 90 % of each GPU (its default, 75 %, leaves PyTorch's share idle;
    # the rest holds gshmem's heap and the CUDA context)
    os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.90")
    os.environ["GSHMEM_JAX_PPERMUTE_BACKEND"] = PERMUTE_BACKEND[o.backend]
    import jax
    import numpy as np
    from jax.sharding import Mesh

    import gshmem.jax as gj

    devices = jax.local_devices()
    if len(devices) != o.nprocs:
        raise RuntimeError(
            f"--framework jax drives every GPU this process sees ({len(devices)}); "
            f"for --np {o.nprocs} set CUDA_VISIBLE_DEVICES to {o.nprocs} of them"
        )
    gj.init()
    try:
        mesh = Mesh(np.array(devices), ("cp",))
        losses, seconds = train(cfg, mesh, data, o.steps, checkpoint=not o.no_checkpoint,
                                keep_attention=o.keep_attention, on_step=on_step)  # fmt: skip
        return {"framework": "jax", "gpus": len(devices), "losses": losses,
                "seconds": seconds, "peak_gib": peak_gib(devices)}  # fmt: skip
    finally:
        gj.finalize()


__all__ = ["PERMUTE_BACKEND", "peak_gib", "run", "setup", "train"]
