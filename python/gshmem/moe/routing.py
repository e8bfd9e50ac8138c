"""The sender's side of an expert-parallel dispatch: where each token goes (DeepEP's layout).

``num_experts`` experts live on ``world`` ranks, ``num_experts // world`` each, in order (expert
``e`` on rank ``e // per_rank``). A token routed to several experts of one rank travels to that
rank once (the bytes on NVLink are per (token, rank), as DeepEP counts them); the receiver then
hands it to each of its experts (arrange.py). Entries of ``topk_idx`` equal to -1 route nowhere.

From ``topk_idx`` ``[tokens, k]`` each rank computes (on the GPU the layout kernel of
src/moe/kernels.cu does it in tiles; ``plan`` is its reference, and the NCCL baseline's plan):

* ``to_rank``  ``[tokens, world]`` bool: token t goes to rank r;
* ``position`` ``[tokens, world]`` int32: t's row among this rank's tokens for r (-1 if none);
* ``counts``   ``[world + num_experts + 1]`` int32: tokens per rank, (token, expert) pairs per
  expert, then how many entries of ``topk_idx`` are out of range (routed nowhere): the row every
  rank contributes to the count exchange, so every rank learns of a bad index at once and all
  of them raise, none left waiting for the others.

After the exchange (every rank's ``counts``, ``[world, world + num_experts + 1]``), sender s
writes its rows for receiver r from ``offsets(...)[r]`` on (the senders before s first), so each
receiver holds its tokens by source rank, then by source token; and each (token, expert) pair
into its slot there, ``expert_slots``: expert-major, then by source rank, token and choice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gshmem._errors import UsageError

if TYPE_CHECKING:
    import torch

MAX_TOPK = 8
MAX_EXPERTS = 1024  # src/moe/common.cuh: kMaxExperts (a block scans every expert's count)


@dataclass(frozen=True)
class Plan:
    """One rank's routing for one dispatch (see the module's docstring)."""

    to_rank: torch.Tensor
    position: torch.Tensor
    counts: torch.Tensor


def check(topk_idx: torch.Tensor, topk_weights: torch.Tensor, num_experts: int, world: int) -> None:
    """Cheap local checks of a dispatch's routing arguments (a UsageError naming the problem).
    The values of ``topk_idx`` are counted by ``plan`` and judged by ``check_counts``."""
    import torch

    if topk_idx.dim() != 2 or topk_idx.dtype not in (torch.int64, torch.int32):
        raise UsageError(
            f"moe: topk_idx must be [tokens, k] int64 or int32, got {tuple(topk_idx.shape)} "
            f"{topk_idx.dtype}"
        )
    k = topk_idx.shape[1]
    if not 1 <= k <= MAX_TOPK:
        raise UsageError(f"moe: top-k must be 1..{MAX_TOPK}, got {k}")
    if k > num_experts:
        raise UsageError(f"moe: top-k ({k}) is larger than the number of experts ({num_experts})")
    if num_experts < world or num_experts % world:
        raise UsageError(f"moe: {num_experts} experts do not split evenly over {world} ranks")
    if topk_weights.shape != topk_idx.shape or topk_weights.dtype != torch.float32:
        raise UsageError(
            f"moe: topk_weights must be float32 of topk_idx's shape {tuple(topk_idx.shape)}, "
            f"got {topk_weights.dtype} {tuple(topk_weights.shape)}"
        )


def check_counts(all_counts: torch.Tensor, num_experts: int) -> None:
    """Raises on every rank alike when any rank's ``topk_idx`` held an index outside
    [-1, num_experts) (``all_counts``: every rank's ``counts``, on the host; columns past the
    bad-index count are ignored)."""
    bad = all_counts[:, all_counts.shape[0] + num_experts]
    if bool((bad > 0).any()):
        ranks = [i for i, b in enumerate(bad.tolist()) if b]
        raise UsageError(
            f"moe: topk_idx of rank(s) {ranks} holds expert indices outside [0, {num_experts}) "
            "(-1 means none)"
        )


def plan(topk_idx: torch.Tensor, num_experts: int, world: int) -> Plan:
    """This rank's routing of ``topk_idx`` (no host synchronisation)."""
    import torch

    idx = topk_idx.long()
    routed = (idx >= 0) & (idx < num_experts)
    rank = torch.where(routed, idx // (num_experts // world), world)  # world: a spare column
    hit = torch.zeros((idx.shape[0], world + 1), dtype=torch.int32, device=idx.device)
    hit.scatter_(1, rank, 1)
    to_rank = hit[:, :world].bool()
    before = torch.cumsum(hit[:, :world], 0, dtype=torch.int32) - hit[:, :world]
    position = torch.where(to_rank, before, -1)
    experts = torch.zeros(num_experts + 1, dtype=torch.int32, device=idx.device)  # + "none"
    experts.scatter_add_(0, torch.where(routed, idx, num_experts).flatten(),
                         torch.ones(idx.numel(), dtype=torch.int32, device=idx.device))  # fmt: skip
    bad = ((idx < -1) | (idx >= num_experts)).sum(dtype=torch.int32).view(1)
    counts = torch.cat([to_rank.sum(0, dtype=torch.int32), experts[:num_experts], bad])
    return Plan(to_rank, position, counts)


def offsets(all_counts: torch.Tensor, me: int, world: int) -> torch.Tensor:
    """``[world]`` int32: the first row of rank ``me``'s tokens in each receiver's buffer."""
    import torch

    tokens = all_counts[:, :world]  # [sender, receiver]
    return (torch.cumsum(tokens, 0, dtype=torch.int32) - tokens)[me]


def received(all_counts: torch.Tensor, me: int, world: int) -> torch.Tensor:
    """``[world + 1]`` int32: where each sender's tokens start in rank ``me``'s buffer, then the
    total."""
    import torch

    column = all_counts[:, me]
    start = torch.zeros(world + 1, dtype=torch.int32, device=column.device)
    start[1:] = torch.cumsum(column, 0)
    return start


def pairs_per_expert(all_counts: torch.Tensor, me: int, world: int, num_experts: int):
    """``[num_experts // world]`` int32: (token, expert) pairs arriving for each of rank ``me``'s
    experts."""
    per = num_experts // world
    mine = all_counts[:, world + me * per : world + (me + 1) * per]
    return mine.sum(0, dtype=mine.dtype)


def expert_slots(all_counts: torch.Tensor, me: int, topk_idx: torch.Tensor, num_experts: int,
                 world: int) -> torch.Tensor:  # fmt: skip
    """``[tokens, k]`` int64: the slot of each of rank ``me``'s (token, choice) pairs among its
    receiver's pairs (-1 where none): the pairs of the receiver's earlier experts (from every
    rank), then expert e's pairs from the senders before ``me``, then ``me``'s pairs of e before
    this one (by token, then choice). The reference of the dispatch kernel's slots."""
    import torch

    per = num_experts // world
    pairs = all_counts[:, world : world + num_experts].long()  # [sender, expert]
    total = pairs.sum(0)
    first_of_rank = torch.arange(num_experts) // per * per
    before = torch.cumsum(total, 0) - total
    base = before - before[first_of_rank] + pairs[:me].sum(0)  # [expert]
    idx = topk_idx.long().cpu()
    routed = (idx >= 0) & (idx < num_experts)
    e = torch.where(routed, idx, num_experts).flatten()
    hot = torch.nn.functional.one_hot(e, num_experts + 1)[:, :num_experts]
    earlier = (torch.cumsum(hot, 0) - hot)[torch.arange(e.numel()), e.clamp(max=num_experts - 1)]
    slots = base[e.clamp(max=num_experts - 1)] + earlier
    return torch.where(routed.flatten(), slots, -1).view(idx.shape)


__all__ = [
    "MAX_EXPERTS",
    "MAX_TOPK",
    "Plan",
    "check",
    "check_counts",
    "expert_slots",
    "offsets",
    "pairs_per_expert",
    "plan",
    "received",
]
