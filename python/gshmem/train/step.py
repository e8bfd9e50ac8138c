"""One training step of the model over every GPU: FSDP2 shards the parameters (fp32 master
weights and AdamW states, bf16 compute, fp32 gradient reduction), context parallelism splits the
sequence (cp.py; the attention is the caller's ``attend``), activation checkpointing recomputes
each block in the backward (all of it, or all but the attention: ``keep_attention``).

Loss normalisation: every rank computes the loss *sum* of its tokens; the sums and token counts
are all-reduced, and each rank back-propagates its sum divided by the global count, times the
world size, because FSDP averages gradients over ranks while a token's gradient must count once.
Context-parallel ranks (shards of one sequence) and data-parallel ranks (other sequences) are
treated alike."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from gshmem.train.model import Attend, Llama


def shard_model(model: Llama, mesh: Any, compute_dtype: torch.dtype = torch.bfloat16) -> Llama:
    """FSDP2 (``fully_shard``) over ``mesh``: each block, the embedding and the output layer,
    then the root. Parameters stay fp32 (the master weights); they are gathered in
    ``compute_dtype`` and gradients reduced in fp32."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32)
    for module in (model.embed, *model.blocks, model.output):
        fully_shard(module, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    return model


def optimizer(model: torch.nn.Module, lr: float = 3e-4) -> torch.optim.Optimizer:
    """AdamW as Llama 3 was trained (betas 0.9/0.95, weight decay 0.1)."""
    return torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)


def train_step(model: Llama, opt: torch.optim.Optimizer, tokens: torch.Tensor,
               labels: torch.Tensor, positions: torch.Tensor, attend: Attend, *,
               checkpoint: bool = True, keep_attention: int = 0, chunk: int = 4096,
               clip: float = 1.0) -> float:  # fmt: skip
    """One step on this rank's ``tokens``/``labels`` [B, S] at ``positions`` [S]; collective over
    the default process group when it is initialised. Returns the global mean loss.
    ``keep_attention``: blocks whose attention is not recomputed (Llama.forward)."""
    hidden = model(tokens, positions, attend, checkpoint=checkpoint, keep_attention=keep_attention)
    loss_sum, count = model.output(hidden, labels, chunk)
    totals = torch.stack([loss_sum.detach(), count.to(loss_sum.dtype)])
    world = 1
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(totals)
        world = dist.get_world_size()
    (loss_sum * (world / totals[1])).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return float(totals[0] / totals[1])


__all__ = ["optimizer", "shard_model", "train_step"]
