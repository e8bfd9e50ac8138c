"""Child side of test_train.py's FSDP test: one rank of a 2-process gloo job that takes one
training step (SGD: AdamW's first step is sign-like, which makes gradients of about zero flip
the update) of a tiny model on its half of a batch and writes the loss and the updated
parameters (gathered) to OUT_DIR/rank<r>.pt.

    python _train_worker.py RANK WORLD PORT OUT_DIR [KEEP_ATTENTION [COMPILE]]

COMPILE=1: the blocks' pieces compiled (Llama.compile_blocks, AOTAutograd without code
generation: ``aot_eager``) under FSDP's hooks.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

from gshmem.train.config import tiny
from gshmem.train.data import repeated_blocks
from gshmem.train.model import Llama, sdpa
from gshmem.train.step import shard_model, train_step

NO_CLIP = float("inf")  # clipping would hide a wrong gradient scale


def batch():
    """The whole batch (4 sequences), the same in every process and in the test."""
    return next(repeated_blocks(tiny().vocab, 12, 4, period=5, seed=9))


def model():
    torch.manual_seed(0)
    return Llama(tiny())


def main() -> None:
    rank, world, port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    keep = int(sys.argv[5]) if len(sys.argv) > 5 else 0
    compiled = len(sys.argv) > 6 and sys.argv[6] == "1"
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)  # fmt: skip
    m = shard_model(model(), init_device_mesh("cpu", (world,)), compute_dtype=torch.float32)
    if compiled:
        m.compile_blocks(backend="aot_eager")
    opt = torch.optim.SGD(m.parameters(), lr=0.5)
    tokens, labels = batch()
    per = tokens.shape[0] // world
    mine = slice(rank * per, (rank + 1) * per)  # data parallel: each rank its sequences
    loss = train_step(m, opt, tokens[mine], labels[mine], torch.arange(tokens.shape[1]), sdpa,
                      keep_attention=keep, chunk=7, clip=NO_CLIP)  # fmt: skip
    params = {n: p.full_tensor() for n, p in m.named_parameters()}
    torch.save({"loss": loss, "params": params}, f"{out}/rank{rank}.pt")
    dist.destroy_process_group()
    # Leave without the interpreter's teardown: there, now and then, a gloo thread that was
    # still joinable ended the process with "terminate called without an active exception"
    # (SIGABRT) after everything above had finished (~1 run in 10 on 2 cores).
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
