"""The moe bench's command line (its measurements need GPUs)."""

from __future__ import annotations

import pytest

from gshmem.bench import SUITES
from gshmem.bench import __main__ as cli
from gshmem.bench.moe import parse_args


def test_moe_is_a_suite() -> None:
    assert "moe" in cli.SUITES and "moe" in SUITES


def test_options() -> None:
    o = parse_args(["--np", "2", "--tokens", "128,4096"])
    assert (o.tokens, o.hidden, o.experts, o.topk, o.blocks) == ([128, 4096], 7168, 256, 8, None)
    assert o.compare == ["gshmem", "gshmem-pull", "gshmem-ll", "nccl"]
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
