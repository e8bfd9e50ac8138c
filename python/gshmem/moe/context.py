"""What both modes of a ``gshmem.moe.Buffer`` share: the team, the experts' placement, the token
shape and dtype, and the argument checks on tokens."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gshmem._errors import UsageError
from gshmem.moe import routing

if TYPE_CHECKING:
    import torch

    from gshmem import Comm
    from gshmem.team import Team


FP8_GROUP = 128  # elements per FP8 scale (src/moe/common.cuh: quantize_row)


@dataclass(frozen=True)
class Context:
    """One buffer's fixed facts (experts ``e`` live on rank ``e // per_rank``)."""

    comm: Comm
    team: Team
    world: int
    me: int  # this PE's rank in the team
    hidden: int
    max_tokens: int  # per rank per dispatch
    num_experts: int
    dtype: torch.dtype
    blocks: int  # thread blocks of every kernel (the same on every rank)
    pes: torch.Tensor  # [world] int32 on the GPU: each rank's world PE
    device_bytes: bytes  # the comm's gshmem_device_t, passed to the kernels

    @property
    def per_rank(self) -> int:
        return self.num_experts // self.world

    def rows_in(self, name: str, t: torch.Tensor, rows: int | None) -> None:
        """``t``: ``[rows, hidden]`` (any rows when None), the buffer's dtype, on its GPU."""
        if t.dim() != 2 or t.shape[1] != self.hidden or (rows is not None and t.shape[0] != rows):
            want = f"[{'tokens' if rows is None else rows}, {self.hidden}]"
            raise UsageError(f"moe: {name} must be {want}, got {tuple(t.shape)}")
        self.on_gpu(name, t)
        if t.dtype != self.dtype:
            raise UsageError(f"moe: {name} is {t.dtype}; this buffer moves {self.dtype}")

    def on_gpu(self, name: str, t: torch.Tensor) -> None:
        import torch

        if t.device != torch.device("cuda", self.comm.device):
            raise UsageError(f"moe: {name} is on {t.device}; the comm's GPU is "
                             f"cuda:{self.comm.device}")  # fmt: skip

    def fp8_ok(self) -> None:
        """FP8 dispatch needs one scale per 128 elements of a row."""
        if self.hidden % FP8_GROUP:
            raise UsageError(f"moe: FP8 dispatch needs hidden to be a multiple of {FP8_GROUP} "
                             f"(a scale per {FP8_GROUP} elements), got {self.hidden}")  # fmt: skip

    def dispatch_args(self, x: torch.Tensor, topk_idx: torch.Tensor, topk_weights: torch.Tensor,
                      use_fp8: bool) -> tuple[torch.Tensor, ...]:  # fmt: skip
        """Checks a dispatch's arguments (either mode); returns x, topk_idx as int64 and
        topk_weights, each contiguous."""
        self.tokens_in(x)
        if use_fp8:
            self.fp8_ok()
        routing.check(topk_idx, topk_weights, self.num_experts, self.world)
        if topk_idx.shape[0] != x.shape[0]:
            raise UsageError("moe: topk_idx must have one row per token of x")
        return x.contiguous(), topk_idx.long().contiguous(), topk_weights.contiguous()

    def most_pairs(self) -> int:
        """The most (token, expert) pairs one rank can receive in a dispatch: every token of
        every rank, once per local expert (at most top-k of them)."""
        return self.max_tokens * self.world * min(self.per_rank, routing.MAX_TOPK)

    def worst_rows_ok(self, worst: int) -> None:
        """A dispatch's ``num_worst_rows``: an int from 0 to most_pairs()."""
        if isinstance(worst, bool) or not isinstance(worst, int):
            raise UsageError(f"moe: num_worst_rows must be an int, got {worst!r}")
        if not 0 <= worst <= self.most_pairs():
            raise UsageError(f"moe: num_worst_rows={worst} is outside [0, {self.most_pairs()}] "
                             "(the most rows a rank can receive)")  # fmt: skip

    def tokens_in(self, x: torch.Tensor) -> None:
        """``x`` must be ``[tokens, hidden]`` with at most ``max_tokens`` tokens."""
        self.rows_in("x", x, None)
        if x.shape[0] > self.max_tokens:
            raise UsageError(f"moe: {x.shape[0]} tokens exceed the buffer's {self.max_tokens}")


__all__ = ["FP8_GROUP", "Context"]
