"""The ``torch-vdev`` column of ``python -m gshmem.bench moe``: the same dispatch and combine with
torch SymmetricMemory's NVSHMEM all-to-alls, as PyTorch's own MoE examples use them.

Dispatch: the sender sorts its (token, choice) pairs by expert (a token with two experts on one
rank travels twice: the op moves a split per (rank, expert)), copies their rows into a symmetric
input and calls ``all_to_all_vdev_2d``, which exchanges the splits on the GPU and leaves the rows
expert-major at the receiver; no host synchronisation. Combine: the experts' outputs, in that
layout in a symmetric buffer, go back with ``all_to_all_vdev_2d_offset`` (the dispatch's output
splits and offsets as its input's), arriving in the sender's sorted order, where each token's
rows are weighted and summed. Every buffer is symmetric, so each is sized for the worst case (one
rank receiving every pair), from NVSHMEM's heap."""

from __future__ import annotations

import os

# Symmetric bytes the buffers need at 4096 tokens, hidden 7168, top-8, 4 GPUs: ~4.7 GB.
HEAP = "8G"
# all_to_all_vdev_2d's limit (torch 2.11: "Number of experts must be smaller than NUM_TILES16")
MOST_EXPERTS_PER_RANK = 16


def unavailable(experts: int, world: int) -> str:
    """'' when torch's NVSHMEM all-to-all runs this shape, else why not."""
    if experts // world > MOST_EXPERTS_PER_RANK:
        return (f"all_to_all_vdev_2d takes at most {MOST_EXPERTS_PER_RANK} experts per rank, "
                f"here {experts // world}")  # fmt: skip
    try:
        import torch.distributed._symmetric_memory as symm_mem
    except ImportError as e:
        return f"torch.distributed._symmetric_memory: {e}"
    return "" if symm_mem.is_nvshmem_available() else "torch was built without NVSHMEM"


class TorchSymmMoe:
    """Behind the bench's interface (dispatch, experts_done, combine)."""

    def __init__(self, world: int, experts: int, tokens: int, k: int, hidden: int,
                 worst: int) -> None:  # fmt: skip
        import torch
        import torch.distributed as dist
        import torch.distributed._symmetric_memory as symm_mem

        os.environ.setdefault("NVSHMEM_SYMMETRIC_SIZE", HEAP)  # read when NVSHMEM starts
        symm_mem.set_backend("NVSHMEM")
        self.group = dist.group.WORLD.group_name
        self.world, self.experts, self.worst, self.sms = world, experts, worst, None
        dev = torch.device("cuda", torch.cuda.current_device())
        bf16, i64 = torch.bfloat16, torch.int64
        most_in, most_out = tokens * k, tokens * k * world

        def symmetric(*shape, dtype=bf16):
            t = symm_mem.empty(*shape, dtype=dtype, device=dev)
            symm_mem.rendezvous(t, group=self.group)
            return t

        self.send, self.recv = symmetric(most_in, hidden), symmetric(most_out, hidden)
        self.splits = symmetric(experts, dtype=i64)
        self.recv_splits = symmetric(2, experts, dtype=i64)  # splits, offsets; expert-major
        self.back_in, self.back = symmetric(most_out, hidden), symmetric(most_in, hidden)
        self.back_splits = symmetric(2, experts, dtype=i64)
        dist.barrier()

    def dispatch(self, x, idx, weights):
        import torch

        tokens, k = idx.shape
        flat = torch.where(idx >= 0, idx, self.experts).flatten()  # none: after every expert
        order = torch.sort(flat, stable=True).indices
        torch.index_select(x, 0, order // k, out=self.send[: tokens * k])
        self.splits.copy_(torch.bincount(flat, minlength=self.experts + 1)[: self.experts])
        torch.ops.symm_mem.all_to_all_vdev_2d(self.send, self.recv, self.splits,
                                              self.recv_splits, self.group)  # fmt: skip
        valid = flat[order] < self.experts
        state = (order // k, torch.where(valid, weights.flatten()[order], 0.0), valid, tokens)
        return self.recv[: self.worst], state, self._rows_per_expert()

    def _rows_per_expert(self):
        """Rows of each local expert in the received layout, on the GPU (no host sync): from
        one expert's first row to the next's (the op pads an empty expert to a row)."""
        import torch

        splits, offsets = (t.view(-1, self.world) for t in self.recv_splits)
        starts = offsets[:, 0]
        last = (starts[-1] + splits[-1].sum()).view(1)
        return torch.cat([starts[1:], last]) - starts

    def experts_done(self, y, state):
        """The experts write their outputs into the symmetric buffer the combine sends from."""
        self.back_in[: y.shape[0]].copy_(y)
        return y

    def combine(self, y, state):
        import torch

        token, weight, valid, tokens = state
        torch.ops.symm_mem.all_to_all_vdev_2d_offset(self.back_in, self.back, self.recv_splits,
                                                     self.back_splits, self.group)  # fmt: skip
        rows = self.back[: token.numel()].float()
        rows = torch.where(valid[:, None], rows * weight[:, None], 0.0)  # past the pairs: garbage
        out = torch.zeros(tokens, rows.shape[1], dtype=torch.float32, device=rows.device)
        out.index_add_(0, token, rows)
        return out.to(y.dtype)


__all__ = ["HEAP", "MOST_EXPERTS_PER_RANK", "TorchSymmMoe", "unavailable"]
