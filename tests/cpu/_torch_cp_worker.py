"""Child side of test_bench_torch_cp.py: one rank of a gloo job that enters
gshmem.bench.torch_cp.sharded_batch (torch's context_parallel) on a whole batch and saves the
shards it yields, and torch's load-balance option inside and after the context.

    python _torch_cp_worker.py RANK WORLD PORT OUT_DIR
"""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.experimental import _attention as cp_attention

from gshmem.bench.torch_cp import sharded_batch

SEQ, BATCH = 48, 2


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    """The whole batch, the same in every process and in the test: distinct ids everywhere."""
    tokens = torch.randperm(SEQ * BATCH, generator=torch.Generator().manual_seed(3))
    tokens = tokens.view(BATCH, SEQ)
    return tokens, tokens + 1000


def main() -> None:
    rank, world, port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)  # fmt: skip
    mesh = init_device_mesh("cpu", (world,))
    cp_attention._cp_options.enable_load_balance = False  # must be on inside, restored after
    tokens, labels = batch()
    with sharded_batch(mesh, tokens, labels) as (t, y, pos):
        inside = cp_attention._cp_options.enable_load_balance
        saved = {"tokens": t.clone(), "labels": y.clone(), "positions": pos.clone()}
    saved["balanced_inside"] = inside
    saved["balanced_after"] = cp_attention._cp_options.enable_load_balance
    saved["whole_untouched"] = bool(torch.equal(tokens, batch()[0]))
    torch.save(saved, f"{out}/rank{rank}.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
