"""Expert-parallel MoE dispatch and combine on gshmem (docs/moe.md).

* ``Buffer(comm, hidden, max_tokens, num_experts)``: symmetric buffers of a team;
  ``buf.dispatch(x, topk_idx, topk_weights)`` sends tokens to their experts' ranks and returns the
  rows received per local expert; ``buf.combine(y, handle)`` sums the experts' outputs, weighted,
  back at each token's rank. Both differentiable.
* ``Buffer(..., low_latency=True)``: ``low_latency_dispatch`` / ``low_latency_combine`` for
  decoding: no host synchronisation, fixed shapes, CUDA-graph capturable, send/receive halves.
* ``routing`` (the sender's plan) and ``arrange`` (the receiver's rows per expert): the math,
  plain torch, testable on the CPU.
"""

from gshmem.moe import arrange, routing
from gshmem.moe.buffer import (
    Buffer,
    Dispatched,
    Handle,
    LowLatencyDispatched,
    LowLatencyHandle,
)

__all__ = [
    "Buffer",
    "Dispatched",
    "Handle",
    "LowLatencyDispatched",
    "LowLatencyHandle",
    "arrange",
    "routing",
]
