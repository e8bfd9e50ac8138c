"""The moe bench's command line and its byte accounting (its measurements need GPUs)."""

from __future__ import annotations

import pytest

from gshmem.bench import SUITES
from gshmem.bench import __main__ as cli
from gshmem.bench.moe import parse_args, sent_counts
from gshmem.bench.moe_torch_symm import TorchSymmMoe, unavailable


def test_moe_is_a_suite() -> None:
    assert "moe" in cli.SUITES and "moe" in SUITES


def test_options() -> None:
    o = parse_args(["--np", "2", "--tokens", "128,4096"])
    assert (o.tokens, o.hidden, o.experts, o.topk, o.blocks) == ([128, 4096], 7168, 256, 8, None)
    assert o.compare == [
        "gshmem", "gshmem-push", "gshmem-pull", "gshmem-nosync", "gshmem-tokens", "gshmem-ll",
        "nccl", "torch-vdev",
    ]  # fmt: skip
    assert parse_args(["--np", "1", "--compare", "gshmem-ll"]).compare == ["gshmem-ll"]


@pytest.mark.parametrize(
    "bad",
    [
        ["--np", "3"],
        ["--np", "2", "--topk", "300"],
        ["--np", "2", "--compare", "deepep"],
        ["--np", "2", "--tokens", "0"],
    ],  # fmt: skip
)
def test_bad_options_exit_2(bad) -> None:
    with pytest.raises(SystemExit) as e:
        parse_args(bad)
    assert e.value.code == 2


def test_sent_counts_match_a_brute_force_count() -> None:
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(3)
    world, per, k = 3, 4, 5
    idx = torch.stack([torch.randperm(world * per, generator=g)[:k] for _ in range(40)])
    idx[torch.rand(idx.shape, generator=g) < 0.2] = -1
    got = sent_counts(idx, per, world)
    rows = [sum(any(e >= 0 and e // per == q for e in row) for row in idx.tolist())
            for q in range(world)]  # fmt: skip
    pairs = [sum(e >= 0 and e // per == q for row in idx.tolist() for e in row)
             for q in range(world)]  # fmt: skip
    assert got.tolist() == [rows, pairs]


def test_torch_vdev_rows_per_expert_span_each_experts_region() -> None:
    # all_to_all_vdev_2d's output, expert-major over 2 ranks: expert 0 gets 3 + 2 rows, expert 1
    # none (the op still gives it one row of padding), expert 2 gets 0 + 4; the stand-in experts
    # must see each expert's whole region, padding included, so the rows after it stay aligned
    torch = pytest.importorskip("torch")
    side = TorchSymmMoe.__new__(TorchSymmMoe)
    side.world = 2
    side.recv_splits = torch.tensor([[3, 2, 0, 0, 0, 4], [0, 3, 5, 5, 6, 6]])
    assert side._rows_per_expert().tolist() == [5, 1, 4]


def test_torch_vdev_refuses_more_experts_per_rank_than_the_op_takes() -> None:
    # DeepSeek-V3 on 4 GPUs: 64 per rank; 64 experts on 4: 16, which the op takes
    assert unavailable(256, 4) == "all_to_all_vdev_2d takes at most 16 experts per rank, here 64"
    assert "experts per rank" not in unavailable(64, 4)
