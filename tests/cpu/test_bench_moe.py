"""The moe bench's command line and its byte accounting (its measurements need GPUs)."""

from __future__ import annotations

import pytest

from gshmem.bench import SUITES
from gshmem.bench import __main__ as cli
from gshmem.bench.moe import parse_args, sent_counts


def test_moe_is_a_suite() -> None:
    assert "moe" in cli.SUITES and "moe" in SUITES


def test_options() -> None:
    o = parse_args(["--np", "2", "--tokens", "128,4096"])
    assert (o.tokens, o.hidden, o.experts, o.topk, o.blocks) == ([128, 4096], 7168, 256, 8, None)
    assert o.compare == [
        "gshmem", "gshmem-push", "gshmem-pull", "gshmem-nosync", "gshmem-tokens", "gshmem-ll",
        "nccl",
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
