"""Replaying a ring call as a CUDA graph, for short shards.

A short shard's call costs the host more than the GPU: Python walks the ring and issues ~50
kernels and stream operations per forward+backward, ~2-3 ms of host time against ~0.8 ms of
GPU time at 2K tokens per GPU and ~2 ms at 4K (docs/attention.md). So the second call of a
problem captures the call once; later calls copy their inputs into the graph's static tensors,
replay it and copy the outputs out, a handful of launches. The copies move each tensor once
more, which at these sizes costs tens of microseconds.

Used on the gshmem transport (whose flags return to their state within a call, so replays need
no reset) when the shard is short, never while the caller is capturing a graph itself (the call
is then captured into the caller's). ``GSHMEM_ATTENTION_GRAPHS``: "auto" (default: q of at most
``AUTO_MAX_ELEMENTS`` elements), "1" (always) or "0" (never). Every rank of a ring decides alike,
from the same problem, so every rank replays the same transfers.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from gshmem._errors import UsageError

if TYPE_CHECKING:
    import torch

# q elements per rank up to which "auto" replays: 4K tokens x 32 heads x 128. Measured causal
# fwd+bwd on 2 x H200 (docs/attention.md): replayed 0.59 / 0.96 ms at 1K / 2K tokens per GPU
# against 2.19 / 2.03 eager (2026-11-24); at 4K (2026-11-26, all-gather schedule, another host of
# the same kind) 2.24 ms replayed against 3.08-3.32 eager, the host issuing a call in ~2.7 ms
# (an earlier host: 2.54 against 2.36); at 8K 7.89 against 7.68, the copies costing more than
# the host time they hide.
AUTO_MAX_ELEMENTS = 4096 * 32 * 128
SEEN = "seen"  # a problem called once: its next call captures


def wanted(backend: str, q_elements: int, capturing: bool) -> bool:
    """Whether a call replays a graph (the policy above)."""
    choice = os.environ.get("GSHMEM_ATTENTION_GRAPHS", "auto").lower()
    if choice not in ("auto", "0", "1"):
        raise UsageError(f"GSHMEM_ATTENTION_GRAPHS must be auto, 0 or 1, got {choice!r}")
    if backend != "gshmem" or capturing or choice == "0":
        return False
    return choice == "1" or q_elements <= AUTO_MAX_ELEMENTS


class Replay:
    """``fn`` captured once on static copies of ``inputs``; calling it runs ``fn`` on new ones."""

    def __init__(self, fn: Callable[..., Sequence[torch.Tensor]], inputs: Sequence) -> None:
        import torch

        self.static = [torch.empty_like(t).copy_(t) for t in inputs]  # keeps the strides
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.outputs = tuple(fn(*self.static))

    def __call__(self, inputs: Sequence) -> tuple[torch.Tensor, ...]:
        for static, t in zip(self.static, inputs, strict=True):
            static.copy_(t)
        self.graph.replay()
        return tuple(o.clone() for o in self.outputs)


def run(cache: dict, key: tuple, fn: Callable, inputs: Sequence) -> tuple[torch.Tensor, ...]:
    """``fn(*inputs)``: eager the first time ``key`` is seen (it builds what the call needs:
    channels, kernel plans, compiled kernels), captured the second, replayed from then on."""
    entry = cache.get(key)
    if entry is None:
        cache[key] = SEEN
        return tuple(fn(*inputs))
    if entry == SEEN:
        entry = cache[key] = Replay(fn, inputs)
    return entry(inputs)


__all__ = ["AUTO_MAX_ELEMENTS", "Replay", "run", "wanted"]
