"""The Llama 3 architecture as JAX functions (the same model as model.py): parameters as a
dict of arrays, ``forward`` with RoPE at given positions and an injected ``attend`` (JAX's
attention on one device, ``gshmem.jax.ring_attention`` inside ``shard_map`` under CP), and the
loss through the output layer a chunk of tokens at a time."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gshmem.train.config import LlamaConfig
from gshmem.train.loss import IGNORE

Params = dict[str, Any]
# attend(q, k, v): [B, S, heads, D], [B, S, kv_heads, D] x2 -> [B, S, heads, D], causal
Attend = Callable[[Any, Any, Any], Any]
# gather(named): a dict of named parameters (a block's, or {"embed": ...}) made whole where they
# are stored split over devices (step_jax.py), called where they are used: inside a checkpointed
# block, so that only one block's whole weights live at a time
Gather = Callable[[Params], Params]


def _whole(named: Params) -> Params:
    return named


def init(cfg: LlamaConfig, key: Any, dtype: Any = None) -> Params:
    """Parameters: normal(0, 0.02) matrices (stored [in, out]), unit norm weights."""
    import jax
    import jax.numpy as jnp

    dtype = dtype or jnp.float32
    keys = iter(jax.random.split(key, 2 + 4 * cfg.layers))

    def dense(shape):
        return 0.02 * jax.random.normal(next(keys), shape, dtype)

    qkv = (cfg.heads + 2 * cfg.kv_heads) * cfg.head_dim
    blocks = [{"attn_norm": jnp.ones(cfg.hidden, dtype), "qkv": dense((cfg.hidden, qkv)),
               "out": dense((cfg.heads * cfg.head_dim, cfg.hidden)),
               "mlp_norm": jnp.ones(cfg.hidden, dtype), "gate_up": dense((cfg.hidden, 2 * cfg.ffn)),
               "down": dense((cfg.ffn, cfg.hidden))} for _ in range(cfg.layers)]  # fmt: skip
    return {
        "embed": dense((cfg.vocab, cfg.hidden)),
        "blocks": blocks,
        "norm": jnp.ones(cfg.hidden, dtype),
        "output": dense((cfg.hidden, cfg.vocab)),
    }


def dot_product_attention(q, k, v):
    """Causal attention on one device (no context parallelism)."""
    import jax

    return jax.nn.dot_product_attention(q, k, v, is_causal=True)


def rms_norm(x, weight, eps: float):
    import jax
    import jax.numpy as jnp

    x32 = x.astype(jnp.float32)
    return (x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, -1, keepdims=True) + eps)).astype(
        x.dtype
    ) * weight


def rope(x, positions, theta: float):
    """Rotary embedding of x [B, S, H, D] at ``positions`` [S] (pairs (i, i + D/2) rotate)."""
    import jax.numpy as jnp

    d = x.shape[-1]
    inv = theta ** (-jnp.arange(0, d, 2, dtype=jnp.float32) / d)
    angle = positions.astype(jnp.float32)[:, None] * inv[None, :]
    cos, sin = jnp.cos(angle)[None, :, None, :], jnp.sin(angle)[None, :, None, :]
    a, b = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    return jnp.concatenate([a * cos - b * sin, a * sin + b * cos], -1).astype(x.dtype)


def _block(p: Params, cfg: LlamaConfig, x, positions, attend: Attend, gather: Gather):
    import jax
    import jax.numpy as jnp

    p = gather(p)
    b, s, _ = x.shape
    h = rms_norm(x, p["attn_norm"], cfg.norm_eps)
    qkv = h @ p["qkv"]
    q, k, v = jnp.split(
        qkv, [cfg.heads * cfg.head_dim, (cfg.heads + cfg.kv_heads) * cfg.head_dim], -1
    )
    q = rope(q.reshape(b, s, cfg.heads, cfg.head_dim), positions, cfg.rope_theta)
    k = rope(k.reshape(b, s, cfg.kv_heads, cfg.head_dim), positions, cfg.rope_theta)
    v = v.reshape(b, s, cfg.kv_heads, cfg.head_dim)
    x = x + attend(q, k, v).reshape(b, s, -1) @ p["out"]
    gate, up = jnp.split(rms_norm(x, p["mlp_norm"], cfg.norm_eps) @ p["gate_up"], 2, -1)
    return x + (jax.nn.silu(gate) * up) @ p["down"]


def forward(
    params: Params,
    cfg: LlamaConfig,
    tokens,
    positions,
    attend: Attend = dot_product_attention,
    checkpoint: bool = False,
    gather: Gather = _whole,
):
    """Final hidden states [B, S, hidden] of ``tokens`` [B, S] at ``positions`` [S]."""
    import jax

    x = gather({"embed": params["embed"]})["embed"][tokens]
    for p in params["blocks"]:
        step = jax.checkpoint(_block, static_argnums=(1, 4, 5)) if checkpoint else _block
        x = step(p, cfg, x, positions, attend, gather)
    return rms_norm(x, gather({"norm": params["norm"]})["norm"], cfg.norm_eps)


def loss(params: Params, hidden, labels, chunk: int = 4096, gather: Gather = _whole):
    """(loss sum, counted tokens) through the output layer, ``chunk`` tokens at a time, each
    chunk's logits recomputed in the backward."""
    import jax
    import jax.numpy as jnp

    h, y = hidden.reshape(-1, hidden.shape[-1]), labels.reshape(-1)
    w = gather({"output": params["output"]})["output"]

    @jax.checkpoint
    def piece(hc, yc):
        logits = (hc @ w).astype(jnp.float32)
        picked = jnp.take_along_axis(logits, jnp.maximum(yc, 0)[:, None], -1)[:, 0]
        per = jax.nn.logsumexp(logits, -1) - picked
        return jnp.sum(jnp.where(yc == IGNORE, 0.0, per))

    total = sum(piece(h[a : a + chunk], y[a : a + chunk]) for a in range(0, h.shape[0], chunk))
    return total, jnp.sum(y != IGNORE)


__all__ = ["Attend", "Gather", "Params", "dot_product_attention", "forward", "init", "loss", "rope"]
