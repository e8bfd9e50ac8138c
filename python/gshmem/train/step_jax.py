"""One training step of the JAX model (model_jax.py) over a mesh axis: the sequence split over
the axis (context parallelism through ``gshmem.jax.ring_attention`` inside ``shard_map``), the
parameters and optimizer states stored sharded over the same axis, AdamW in fp32. As FSDP: each
block all-gathers its weights where it runs (inside its checkpoint, so the backward gathers them
again instead of keeping them) and the gather's transpose reduce-scatters their gradients, so
one block's whole weights and gradients live at a time, not the model's.

The loss is the global mean over tokens: each device's loss sum and token count are summed over
the axis inside the step, so every device's gradient is its share of one loss."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gshmem.train.config import LlamaConfig

Optimizer = tuple[Callable[[Any], Any], Callable[[Any, Any, Any], tuple[Any, Any]]]


def adamw(lr: float = 3e-4, b1: float = 0.9, b2: float = 0.95, eps: float = 1e-8,
          weight_decay: float = 0.1) -> Optimizer:  # fmt: skip
    """(init, update) of AdamW as Llama 3 was trained; update(params, grads, state) returns
    (new params, new state). ``init(params)`` runs eagerly on placed parameters: each moment
    is made with its parameter's sharding (under ``jit`` the zeros would land on one device)."""
    import jax
    import jax.numpy as jnp

    def init(params):
        def zeros(p):
            return jnp.zeros_like(p, device=p.sharding)

        return {
            "m": jax.tree.map(zeros, params),
            "v": jax.tree.map(zeros, params),
            "t": jnp.zeros((), jnp.int32),
        }

    def update(params, grads, state):
        t = state["t"] + 1
        m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, state["m"], grads)
        v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, state["v"], grads)
        c1, c2 = 1 - b1 ** t.astype(jnp.float32), 1 - b2 ** t.astype(jnp.float32)

        def step(p, m, v):
            return p - lr * ((m / c1) / (jnp.sqrt(v / c2) + eps) + weight_decay * p)

        return jax.tree.map(step, params, m, v), {"m": m, "v": v, "t": t}

    return init, update


def sgd(lr: float) -> Optimizer:
    """Plain gradient descent (exact comparisons in tests: Adam's first step is sign-like)."""
    import jax

    def update(params, grads, state):
        return jax.tree.map(lambda p, g: p - lr * g, params, grads), state

    return (lambda params: {}), update


def _layout(params: Any, n: int) -> list[tuple[str, bool, bool]]:
    """(name, stacked by layer, split) per parameter, in the tree's leaf order. A parameter (a
    layer's, for the stacked blocks) is stored split over n devices by its first dimension,
    where n divides it; else replicated. Every layer's weight of a name has the same shape."""
    import jax

    from gshmem.train.model_jax import BLOCKS

    rows = []
    for path, p in jax.tree_util.tree_flatten_with_path(params)[0]:
        stacked = path[0].key == BLOCKS
        shape = p.shape[1:] if stacked else p.shape
        rows.append((path[-1].key, stacked, len(shape) > 0 and shape[0] % n == 0))
    return rows


def _specs(params: Any, n: int, axis: str) -> Any:
    import jax
    from jax.sharding import PartitionSpec as P

    specs = [P(*([None] * stacked), axis) if split else P()
             for _, stacked, split in _layout(params, n)]  # fmt: skip
    return jax.tree.unflatten(jax.tree.structure(params), specs)


def shardings(params: Any, mesh: Any, axis: str) -> Any:
    """A NamedSharding per parameter: its first dimension (a layer's first dimension, for the
    stacked blocks) split over ``axis`` where that divides, else replicated."""
    import jax
    from jax.sharding import NamedSharding

    return jax.tree.map(lambda s: NamedSharding(mesh, s), _specs(params, mesh.shape[axis], axis))


def _gather(params: Any, n: int, axis: str, dtype: Any = None):
    """model_jax's gather inside shard_map: a named parameter (a layer's, inside the scan over
    blocks) cast to ``dtype`` (None: kept) while still split, then all-gathered whole where it
    is split over ``axis``. Casting here, one layer at a time, keeps no whole-model copy in the
    compute dtype, and the cast's gradient hands each layer's back in the parameters' dtype."""
    import jax

    split = {name: s for name, _, s in _layout(params, n)}

    def cast(p):
        return p if dtype is None else p.astype(dtype)

    def gather(named):
        return {name: jax.lax.all_gather(cast(p), axis, tiled=True) if split[name] else cast(p)
                for name, p in named.items()}  # fmt: skip

    return gather


def make_step(
    cfg: LlamaConfig, mesh: Any, opt: Optimizer, axis: str = "cp",
    implementation: str | None = None, checkpoint: bool = True, chunk: int = 4096,
    compute_dtype: Any = None, keep_attention: int = 0,
):  # fmt: skip
    """step(params, opt_state, tokens, labels, positions) -> (params, opt_state, loss), jitted;
    tokens/labels [B, S] and positions [S] laid out by gshmem.jax.attention.shard (each device's
    block of the sequence axis is its ring shard). ``compute_dtype`` (e.g. bfloat16): the
    forward and backward run on the parameters cast to it (each layer's cast where it is
    gathered, while still sharded, so the gathers move the cast weights), the parameters,
    gradients and optimizer stay in their own dtype (fp32 master weights); None computes in the
    parameters' dtype. ``keep_attention``: blocks whose attention is not recomputed under
    ``checkpoint`` (model_jax.forward)."""
    import jax
    from jax.sharding import PartitionSpec as P

    from gshmem.jax.attention import ring_attention
    from gshmem.train import model_jax

    def attend(q, k, v):
        return ring_attention(q, k, v, axis, implementation=implementation, mesh=mesh)

    n = mesh.shape[axis]

    def sharded_loss(params, tokens, labels, positions):
        gather = _gather(params, n, axis, compute_dtype)

        def local(params, tokens, labels, positions):
            hidden = model_jax.forward(params, cfg, tokens, positions, attend, checkpoint, gather,
                                       keep_attention)  # fmt: skip
            total, count = model_jax.loss(params, hidden, labels, chunk, gather)
            return jax.lax.psum(total, axis) / jax.lax.psum(count, axis)

        in_specs = (_specs(params, n, axis), P(None, axis), P(None, axis), P(axis))
        sharded = jax.shard_map(local, mesh=mesh, in_specs=in_specs, out_specs=P(),
                                check_vma=False)  # fmt: skip
        return sharded(params, tokens, labels, positions)

    def step(params, state, tokens, labels, positions):
        loss, grads = jax.value_and_grad(sharded_loss)(params, tokens, labels, positions)
        params, state = opt[1](params, grads, state)
        return params, state, loss

    return jax.jit(step, donate_argnums=(0, 1))


__all__ = ["adamw", "make_step", "sgd", "shardings"]
