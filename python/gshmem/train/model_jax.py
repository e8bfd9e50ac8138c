"""The Llama 3 architecture as JAX functions (the same model as model.py): parameters as a
dict of arrays, ``forward`` with RoPE at given positions and an injected ``attend`` (JAX's
attention on one device, ``gshmem.jax.ring_attention`` inside ``shard_map`` under CP), and the
loss through the output layer a chunk of tokens at a time.

The blocks' weights are stacked by layer (``params[BLOCKS][name]``: [layers, ...]) and the
forward scans them, as the loss scans its chunks: XLA compiles one block and one chunk, and
runs them one after another, so their transient memory is one block's and one chunk's (an
unrolled loop left XLA free to keep several alive at once, and to take minutes to compile 32
layers)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gshmem.train.config import LlamaConfig
from gshmem.train.loss import IGNORE

Params = dict[str, Any]
# attend(q, k, v): [B, S, heads, D], [B, S, kv_heads, D] x2 -> [B, S, heads, D], causal
Attend = Callable[[Any, Any, Any], Any]
# gather(named): a dict of named parameters (a block's, or {"embed": ...}) in the compute dtype,
# made whole where they are stored split over devices (step_jax.py), called where they are used:
# inside a checkpointed block, so that only one block's whole weights live at a time
Gather = Callable[[Params], Params]
BLOCKS = "blocks"  # the parameters stacked by layer: dimension 0 is the layer


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
        BLOCKS: jax.tree.map(lambda *layers: jnp.stack(layers), *blocks),
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


def _qkv(p: Params, cfg: LlamaConfig, x, positions):
    """q, k, v of the block's input ``x`` [B, S, hidden]: [B, S, heads, D], rotated."""
    import jax.numpy as jnp

    b, s, _ = x.shape
    h = rms_norm(x, p["attn_norm"], cfg.norm_eps)
    q, k, v = jnp.split(
        h @ p["qkv"], [cfg.heads * cfg.head_dim, (cfg.heads + cfg.kv_heads) * cfg.head_dim], -1
    )
    q = rope(q.reshape(b, s, cfg.heads, cfg.head_dim), positions, cfg.rope_theta)
    k = rope(k.reshape(b, s, cfg.kv_heads, cfg.head_dim), positions, cfg.rope_theta)
    return q, k, v.reshape(b, s, cfg.kv_heads, cfg.head_dim)


def _finish(p: Params, cfg: LlamaConfig, x, attended):
    """The output projection of the attention, the residual adds and the MLP."""
    import jax
    import jax.numpy as jnp

    b, s, _ = x.shape
    x = x + attended.reshape(b, s, -1) @ p["out"]
    gate, up = jnp.split(rms_norm(x, p["mlp_norm"], cfg.norm_eps) @ p["gate_up"], 2, -1)
    return x + (jax.nn.silu(gate) * up) @ p["down"]


def _block(p: Params, cfg: LlamaConfig, x, positions, attend: Attend, gather: Gather):
    p = gather(p)
    return _finish(p, cfg, x, attend(*_qkv(p, cfg, x, positions)))


def _kept_block(p: Params, cfg: LlamaConfig, x, positions, attend: Attend, gather: Gather):
    """The block recomputing all but its attention in the backward: the pieces before and
    after it are checkpointed (each gathers the weights it uses), the attention's residuals
    are kept."""
    import jax

    qkv = jax.checkpoint(lambda p, x: _qkv(gather(p), cfg, x, positions))
    finish = jax.checkpoint(lambda p, x, o: _finish(gather(p), cfg, x, o))
    return finish(p, x, attend(*qkv(p, x)))


def forward(
    params: Params,
    cfg: LlamaConfig,
    tokens,
    positions,
    attend: Attend = dot_product_attention,
    checkpoint: bool = False,
    gather: Gather = _whole,
    keep_attention: int = 0,
):
    """Final hidden states [B, S, hidden] of ``tokens`` [B, S] at ``positions`` [S].
    ``checkpoint``: recompute each block in the backward, except the attention of the first
    ``keep_attention`` blocks, whose residuals stay (more memory, fewer FLOPs)."""
    import jax

    def layer(x, p):
        return _block(p, cfg, x, positions, attend, gather), None

    def kept(x, p):
        return _kept_block(p, cfg, x, positions, attend, gather), None

    x = gather({"embed": params["embed"]})["embed"][tokens]
    blocks, n = params[BLOCKS], keep_attention if checkpoint else 0
    if n:  # two scans: the kept blocks, then the others
        x, _ = jax.lax.scan(kept, x, jax.tree_util.tree_map(lambda a: a[:n], blocks))
        blocks = jax.tree_util.tree_map(lambda a: a[n:], blocks)
    if n < cfg.layers:
        x, _ = jax.lax.scan(jax.checkpoint(layer) if checkpoint else layer, x, blocks)
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

    def add(total, hy):
        return total + piece(*hy), None

    whole = h.shape[0] // chunk * chunk  # the full chunks, scanned; then the rest
    chunks = (h[:whole].reshape(-1, chunk, h.shape[1]), y[:whole].reshape(-1, chunk))
    total, _ = jax.lax.scan(add, jnp.zeros((), jnp.float32), chunks)
    if whole < h.shape[0]:
        total = total + piece(h[whole:], y[whole:])
    return total, jnp.sum(y != IGNORE)


__all__ = [
    "BLOCKS",
    "Attend",
    "Gather",
    "Params",
    "dot_product_attention",
    "forward",
    "init",
    "loss",
    "rope",
]
