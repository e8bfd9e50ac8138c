"""Context-parallel ring attention for Hugging Face transformers models (transformers >= 5).

::

    import gshmem, gshmem.attention.hf as cp
    comm = gshmem.init()
    name = cp.register(comm)                       # "gshmem_ring"
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation=name)
    # or, on an existing model:  model.set_attn_implementation(name)

    batch = cp.shard_inputs(input_ids, world=comm.nranks, rank=comm.rank)
    out = model(input_ids=batch.input_ids, position_ids=batch.position_ids, use_cache=False)

Every rank runs the whole model on its shard of the sequence (``shard_inputs``); only the
attention layers talk to each other, through ``gshmem.attention.ring_attention``. What it computes
is plain causal self-attention over the FULL sequence, so:

* ``position_ids`` must be the global positions of the local tokens (``shard_inputs`` gives
  them): RoPE then rotates every token as in the unsharded model.
* No padding masks, no packed documents, no sliding-window/chunked/bidirectional layers, no
  KV-cache decoding, no attention dropout and no ``output_attentions``: each is refused with a
  ``gshmem.UsageError`` instead of silently computing something else.
* Next-token labels must be shifted on the full sequence before sharding (``shard_inputs`` does
  it): a shard's last token predicts a token that lives on another rank.

``register`` also registers a mask function under the same name (transformers'
``AttentionMaskInterface``), so the model never materialises an O(S^2) mask: HF's
``create_causal_mask`` asks it for the mask and gets None after it has checked that the request
was plain causal. The attention function then refuses any mask that reaches it (a user's 4-D
mask): the only mask it can honour is the global causal one, which ring attention applies itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from gshmem._errors import UsageError
from gshmem.attention import layout as _layout

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch

    from gshmem import Comm
    from gshmem.team import Team

DEFAULT_NAME = "gshmem_ring"
IGNORE_INDEX = -100

# Keyword arguments some transformers models pass to their attention function for features ring
# attention does not compute (any of them not None is refused).
_UNSUPPORTED_KWARGS = {
    "position_bias": "a relative position bias (T5-style)",
    "sliding_window": "sliding-window attention",
    "softcap": "logit soft-capping",
    "s_aux": "attention sinks",
    "sinks": "attention sinks",
    "cu_seq_lens_q": "packed sequences (flash-attention varlen kwargs)",
    "cu_seq_lens_k": "packed sequences (flash-attention varlen kwargs)",
}


def ring_attention(*args: Any, **kwargs: Any) -> torch.Tensor:
    """``gshmem.attention.ring_attention``, imported on first use (it registers torch custom ops).
    The registered attention function looks this name up at every call."""
    from gshmem.attention.ops import ring_attention as impl

    return impl(*args, **kwargs)


class ShardedInputs(NamedTuple):
    """One rank's part of a batch, every tensor ``[batch, S / world]`` in the local token order."""

    input_ids: torch.Tensor
    position_ids: torch.Tensor  # the GLOBAL positions of the local tokens
    shift_labels: torch.Tensor  # the label of each local token: the NEXT token of the full sequence


def shard_inputs(
    input_ids: torch.Tensor,
    position_ids: torch.Tensor | None = None,
    labels: torch.Tensor | None = None,
    *,
    world: int,
    rank: int,
    layout: str = "zigzag",
) -> ShardedInputs:
    """Rank ``rank``'s shard of a ``[batch, S]`` batch for context parallelism over ``world`` ranks.

    ``layout`` must be the one given to ``register`` (``"zigzag"``: rank r holds chunks r and
    2W-1-r of 2W; ``"contiguous"``: chunk r of W); S must divide by 2W (zigzag) or W.

    * ``position_ids`` (default ``arange(S)`` for every row) are sharded like the tokens, so each
      local token keeps its global position and RoPE matches the unsharded model.
    * ``labels`` are HF-style unshifted labels (default: ``input_ids``; ``-100`` = ignored). They
      are shifted on the FULL sequence before sharding: ``shift_labels[:, :-1] = labels[:, 1:]``
      and ``shift_labels[:, -1] = -100``. Shifting a shard instead would pair each shard's last
      token with the wrong target and drop a target at every chunk boundary.

    Loss: pass the shard's labels to a transformers causal LM as both ``labels=`` (so it computes a
    loss) and ``shift_labels=`` (so it does not shift them again), with
    ``num_items_in_batch=n``, where ``n`` is the count of labels ``!= -100`` over the FULL batch
    (``(full_shift_labels != -100).sum()``, or the all-reduced sum of the shards' counts). Each
    rank's loss is then its summed token losses / n; all-reducing the losses (sum) gives the mean
    loss of the unsharded model, and all-reducing the gradients of the per-rank losses (sum; do not
    average) gives its gradients. Without ``num_items_in_batch`` each rank's loss is the mean over
    its own tokens, which differs from the full mean whenever ranks hold different numbers of
    labelled tokens (every zigzag shard but one holds the final -100).
    """
    import torch

    _layout.check_layout(layout)
    if input_ids.dim() != 2:
        raise UsageError(
            f"shard_inputs: input_ids must be [batch, seq], got {tuple(input_ids.shape)}"
        )
    batch, seq = input_ids.shape
    if position_ids is None:
        position_ids = torch.arange(seq, device=input_ids.device).expand(batch, seq)
    if labels is None:
        labels = input_ids
    for name, t in (("position_ids", position_ids), ("labels", labels)):
        if t.dim() != 2 or t.shape[1] != seq or t.shape[0] not in (1, batch):
            raise UsageError(
                f"shard_inputs: {name} must be [batch, seq] (or [1, seq]) like input_ids "
                f"{tuple(input_ids.shape)}, got {tuple(t.shape)}"
            )
    shifted = torch.full_like(labels, IGNORE_INDEX)
    shifted[:, :-1] = labels[:, 1:]
    return ShardedInputs(
        *(_layout.shard(t, world, rank, layout, dim=1) for t in (input_ids, position_ids, shifted))
    )


def register(
    comm: Comm | None = None,
    team: Team | None = None,
    layout: str = "zigzag",
    backend: str = "auto",
    name: str = DEFAULT_NAME,
) -> str:
    """Registers ring attention with transformers as the attention implementation ``name`` and
    returns ``name`` (for ``attn_implementation=`` or ``model.set_attn_implementation``).

    Registers two things under ``name``, both process-wide in transformers: the attention
    function (``AttentionInterface``), which calls ``ring_attention(q, k, v, comm=comm, team=team,
    causal=..., scale=..., layout=layout, backend=backend)`` with K/V as the model made them (GQA
    heads are not expanded), and a mask function (``AttentionMaskInterface``) that checks the
    model's mask request is plain causal and returns None, so no mask is built. Registering again
    under the same name replaces both. ``comm``/``team``/``backend`` are ring_attention's;
    ``layout`` must match the one the inputs were sharded with (``shard_inputs``).
    """
    try:
        from transformers import AttentionInterface, AttentionMaskInterface
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise UsageError(
            "gshmem.attention.hf.register needs transformers >= 5 "
            "(AttentionInterface and AttentionMaskInterface)"
        ) from e

    _layout.check_layout(layout)
    if backend not in ("auto", "gshmem", "nccl"):
        raise UsageError(f"backend must be 'auto', 'gshmem' or 'nccl', got {backend!r}")
    AttentionInterface.register(name, make_attention_function(comm, team, layout, backend, name))
    AttentionMaskInterface.register(name, make_mask_function(layout, name))
    return name


def make_attention_function(
    comm: Comm | None, team: Team | None, layout: str, backend: str, name: str = DEFAULT_NAME
) -> Callable[..., tuple[torch.Tensor, None]]:
    """The function ``register`` installs: transformers' attention-function signature,
    ``(module, query [B, Hq, S, D], key [B, Hkv, S, D], value, attention_mask, scaling=None,
    dropout=0.0, **kwargs) -> (out [B, S, Hq, D] contiguous, None)``, as ``sdpa_attention_forward``.
    Causal unless the call (``is_causal=``) or the module (``module.is_causal``) says otherwise.
    In the first layer (``module.layer_idx == 0``, once per forward) it also checks the
    ``position_ids`` the model passes along against this rank's global positions
    (``check_positions``: one host sync; skipped while compiling or capturing a CUDA graph)."""
    expected: dict[tuple, torch.Tensor] = {}

    def gshmem_ring_attention(
        module: torch.nn.Module,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: Any,
        scaling: float | None = None,
        dropout: float = 0.0,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, None]:
        check_call(module, query, key, attention_mask, dropout, kwargs, name)
        positions = kwargs.get("position_ids")
        if positions is not None and getattr(module, "layer_idx", None) == 0 and not _tracing():
            index, world = _team_place(comm, team)
            check_positions(positions, query.shape[2], index, world, layout, name, expected)
        causal = kwargs.get("is_causal")
        if causal is None:
            causal = getattr(module, "is_causal", True)
        out = ring_attention(
            query,
            key,
            value,
            comm=comm,
            team=team,
            causal=bool(causal),
            scale=scaling,
            layout=layout,
            backend=backend,
        )
        return out.transpose(1, 2).contiguous(), None

    return gshmem_ring_attention


def check_call(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    attention_mask: Any,
    dropout: float,
    kwargs: dict[str, Any],
    name: str = DEFAULT_NAME,
) -> None:
    """Refuses (``UsageError``) an attention call that ring attention cannot compute exactly."""
    where = f"attention implementation {name!r} (gshmem ring attention)"
    if attention_mask is not None:
        raise UsageError(
            f"{where} got an attention mask ({type(attention_mask).__name__}"
            f"{tuple(getattr(attention_mask, 'shape', ()))}); it computes plain causal attention "
            "over the full sequence and cannot apply a mask. Pass attention_mask=None (or a 2-D "
            "all-ones mask), not a 4-D mask, and register the implementation with "
            "gshmem.attention.hf.register so the model does not build one."
        )
    if dropout:
        raise UsageError(
            f"{where} does not implement attention dropout (got dropout={dropout}); set the "
            "config's attention_dropout to 0"
        )
    config = getattr(module, "config", None)
    if kwargs.get("output_attentions", getattr(config, "output_attentions", False)):
        raise UsageError(f"{where} never forms the attention weights: output_attentions=True")
    for key_name, what in _UNSUPPORTED_KWARGS.items():
        if kwargs.get(key_name) is not None:
            raise UsageError(f"{where} does not implement {what} ({key_name}= was given)")
    if query.shape[2] != key.shape[2]:
        raise UsageError(
            f"{where}: {query.shape[2]} queries but {key.shape[2]} keys; KV-cache decoding is not "
            "supported (run the model with use_cache=False)"
        )


def check_positions(
    position_ids: torch.Tensor,
    local_len: int,
    index: int,
    world: int,
    layout: str,
    name: str = DEFAULT_NAME,
    cache: dict[tuple, torch.Tensor] | None = None,
) -> None:
    """Refuses (``UsageError``) ``position_ids`` that are not, in every row, the global positions
    of the tokens that member ``index`` of ``world`` holds in ``layout`` (a shard of
    ``arange(local_len * world)``): local positions (the model's default when none are given)
    would give RoPE the wrong angles, and restarting positions mean packed documents."""
    import torch

    key = (local_len, index, world, layout, position_ids.device)
    want = None if cache is None else cache.get(key)
    if want is None:
        idx = _layout.token_index(local_len * world, world, index, layout)
        want = torch.tensor(idx, device=position_ids.device)
        if cache is not None:
            cache[key] = want
    if position_ids.shape[-1] != local_len or not bool((position_ids == want).all()):
        raise UsageError(
            f"attention implementation {name!r} (gshmem ring attention): position_ids must be "
            f"the global positions of this rank's tokens (member {index} of {world}, layout "
            f"{layout!r}: a shard of arange({local_len * world})), got "
            f"{position_ids.flatten()[:8].tolist()}...; shard them with the tokens "
            "(gshmem.attention.hf.shard_inputs) and pass position_ids= to the model"
        )


def _team_place(comm: Comm | None, team: Team | None) -> tuple[int, int]:
    """(this rank's index, member count) of the ring: ``team`` when given, else every PE of
    ``comm`` (None: the default comm, as gshmem.torch resolves it)."""
    if team is not None:
        return team.rank, team.size
    if comm is None:
        from gshmem import _registry

        comm = _registry.lookup(_registry.resolve(None))
    return comm.rank, comm.nranks


def _tracing() -> bool:
    import torch

    if torch.compiler.is_compiling():
        return True
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def make_mask_function(layout: str, name: str = DEFAULT_NAME) -> Callable[..., None]:
    """The mask function ``register`` installs (transformers' ``AttentionMaskInterface``
    signature, all keywords). Returns None, after checking that the mask transformers asked for is
    the plain causal one over this rank's tokens (else ``UsageError``):

    * the model config has only full-attention layers (``layer_types``; without them, no
      ``sliding_window``): the rule of transformers' ``supports_context_parallel``;
    * keys and queries cover the same positions (no KV-cache history; any cache whose offsets
      are tensors, i.e. a static cache, is refused);
    * the 2-D ``attention_mask`` is None or all ones (reading it is one host sync per forward;
      pass None to avoid it; while compiling it must be None);
    * ``mask_function`` is ``causal_mask_function``, or causal AND the "packed sequence" mask that
      ``create_causal_mask`` derives from ``position_ids``, provided that mask is what the zigzag
      layout produces (the local positions jump once, at the middle, from chunk r to chunk
      2W-1-r: HF takes the jump for a document boundary); anything else (sliding window, chunked,
      bidirectional, real packed documents, modality overlays) is refused. This check reads
      closures and tensors, so it runs in eager mode only (torch.compile traces the rest).
    """

    def gshmem_ring_mask(
        *,
        batch_size: int,
        q_length: int,
        kv_length: int,
        q_offset: Any = 0,
        kv_offset: Any = 0,
        mask_function: Callable | None = None,
        attention_mask: torch.Tensor | None = None,
        config: Any = None,
        **_: Any,
    ) -> None:
        check_mask_request(
            layout,
            q_length,
            kv_length,
            q_offset,
            kv_offset,
            mask_function,
            attention_mask,
            config,
            name,
        )
        return None

    return gshmem_ring_mask


def check_mask_request(
    layout: str,
    q_length: int,
    kv_length: int,
    q_offset: Any,
    kv_offset: Any,
    mask_function: Callable | None,
    attention_mask: torch.Tensor | None,
    config: Any = None,
    name: str = DEFAULT_NAME,
) -> None:
    """``make_mask_function``'s checks (see there); raises ``UsageError``."""
    import torch

    where = f"attention implementation {name!r} (gshmem ring attention)"
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None:
        other = sorted({t for t in layer_types if t != "full_attention"})
    else:
        other = ["sliding_window"] if getattr(config, "sliding_window", None) is not None else []
    if other:
        raise UsageError(
            f"{where}: the model has {', '.join(other)} layers; ring attention computes full "
            "causal attention only"
        )
    if not (isinstance(q_offset, int) and isinstance(kv_offset, int)) or (
        q_offset or kv_offset or kv_length != q_length
    ):
        raise UsageError(
            f"{where}: the keys cover {kv_length} positions from {kv_offset} and the queries "
            f"{q_length} from {q_offset}; KV caches are not supported (use_cache=False) and a "
            "2-D attention_mask must cover this rank's tokens only"
        )
    compiling = torch.compiler.is_compiling()
    if attention_mask is not None:
        if compiling:
            raise UsageError(
                f"{where}: pass attention_mask=None when compiling (a 2-D mask must be all ones, "
                "which cannot be checked inside a compiled graph)"
            )
        if not bool(attention_mask.all()):
            raise UsageError(
                f"{where} got a padding mask (attention_mask with zeros); it computes plain "
                "causal attention over the full sequence. Pack or pad sequences to a common "
                "length, mark the padded targets with label -100, and pass attention_mask=None."
            )
    if compiling or mask_function is None or _is_causal(mask_function):
        return
    ids = _packed_sequence_ids(mask_function)
    if ids is not None and _is_layout_artifact(ids, layout):
        return
    what = getattr(mask_function, "__qualname__", repr(mask_function))
    raise UsageError(
        f"{where}: the model asked for a mask other than plain causal ({what}: sliding-window, "
        "chunked, bidirectional or overlay masks, or packed documents, i.e. position_ids that "
        "restart). Only causal attention over the full sequence is supported, with position_ids "
        "= the global positions of the local tokens (gshmem.attention.hf.shard_inputs)."
    )


def _is_causal(fn: Callable) -> bool:
    from transformers.masking_utils import causal_mask_function

    return fn is causal_mask_function


def _closure(fn: Callable) -> dict[str, Any]:
    code, cells = getattr(fn, "__code__", None), getattr(fn, "__closure__", None)
    if code is None or cells is None:
        return {}
    try:
        return {n: c.cell_contents for n, c in zip(code.co_freevars, cells, strict=True)}
    except ValueError:  # an empty cell
        return {}


def _is_causal_by_position(fn: Callable) -> bool:
    """``causal_mask_function`` itself, or as transformers >= 5.24 wraps it for packed sequences
    (``remap_positions_for_packed_sequence``: causal over the given position_ids, which
    shard_inputs makes the global positions)."""
    if _is_causal(fn):
        return True
    if not getattr(fn, "__qualname__", "").startswith("remap_positions_for_packed_sequence."):
        return False
    inner = _closure(fn).get("mask_function")
    return inner is not None and _is_causal(inner)


def _packed_sequence_ids(fn: Callable) -> torch.Tensor | None:
    """The document ids HF derived from position_ids when ``fn`` is exactly
    ``and_masks(causal, packed_sequence_mask_function(ids))``, causal as ``create_causal_mask``
    composes it (``_is_causal_by_position``); None for any other function."""
    import torch

    parts = _closure(fn).get("mask_functions")
    if not (isinstance(parts, tuple) and len(parts) == 2 and _is_causal_by_position(parts[0])):
        return None
    if not getattr(parts[1], "__qualname__", "").startswith("packed_sequence_mask_function."):
        return None
    ids = _closure(parts[1]).get("packed_sequence_mask")
    return ids if isinstance(ids, torch.Tensor) and ids.dim() == 2 else None


def _is_layout_artifact(ids: torch.Tensor, layout: str) -> bool:
    """True when the document ids are those of one document sharded in ``layout``: all zeros, or
    (zigzag) zeros for the front half and ones for the back half of every row."""
    import torch

    length = ids.shape[1]
    if not bool((ids == 0).all()):
        if layout != "zigzag" or length % 2:
            return False
        back = (torch.arange(length, device=ids.device) >= length // 2).to(ids.dtype)
        return bool((ids == back).all())
    return True


__all__ = [
    "DEFAULT_NAME",
    "ShardedInputs",
    "make_attention_function",
    "make_mask_function",
    "register",
    "ring_attention",
    "shard_inputs",
]
