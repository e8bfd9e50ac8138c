"""The torch context-parallel baseline (gshmem.bench.torch_cp): torch's context_parallel, as the
benches enter it, gives each rank the shard of gshmem's zigzag layout, so a torch_cp column or
training run holds the same tokens, labels and positions on each rank as gshmem's (gloo, CPU)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gshmem.bench.torch_cp import context_parallel_shards
from gshmem.tcp_ports import free_port
from gshmem.train.cp import shard_batch

WORKER = Path(__file__).with_name("_torch_cp_worker.py")


@pytest.mark.parametrize("world", [2, 4])
def test_torch_shards_are_the_zigzag_shards(world, tmp_path) -> None:
    import _torch_cp_worker as worker

    port = free_port()
    procs = [subprocess.Popen([sys.executable, str(WORKER), str(r), str(world), str(port),
                               str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for r in range(world)]  # fmt: skip
    outs = [p.communicate(timeout=180)[0].decode() for p in procs]
    assert [p.returncode for p in procs] == [0] * world, "\n".join(outs)
    tokens, labels = worker.batch()
    for rank in range(world):
        got = torch.load(tmp_path / f"rank{rank}.pt")
        want_t, want_y, want_pos = shard_batch(tokens, labels, world, rank)
        assert torch.equal(got["tokens"], want_t), rank
        assert torch.equal(got["labels"], want_y), rank
        assert torch.equal(got["positions"], want_pos), rank
        assert got["balanced_inside"] and not got["balanced_after"]
        assert got["whole_untouched"]  # the caller's batch is copied, not sharded in place


def test_unknown_rotate_method_is_refused() -> None:
    with pytest.raises(ValueError, match="rotate must be one of"):
        with context_parallel_shards(None, [], [], rotate="ring"):
            pass
