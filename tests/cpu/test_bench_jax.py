"""`python -m gshmem.bench jax`'s options (the measurement itself needs GPUs)."""

from __future__ import annotations

import pytest

from gshmem.bench import jax_suite
from gshmem.bench.__main__ import SUITES


def test_options() -> None:
    assert "jax" in SUITES
    o = jax_suite.parse_args(["--ops", "psum", "-b", "1K", "-e", "1M", "--layout", "per-gpu",
                              "--np", "2"])  # fmt: skip
    assert o.ops == ["psum"] and o.minbytes == 1024 and o.maxbytes == 1 << 20
    assert o.layout == "per-gpu" and o.nprocs == 2
    d = jax_suite.parse_args([])
    assert d.layout == "one" and d.ops == ["ppermute", "psum", "attention"]
    assert d.maxbytes == 256 << 20 and d.tokens == [2048, 8192, 32768]


@pytest.mark.parametrize(
    "bad", [["--ops", "pmax"], ["--calls", "0"], ["--layout", "two"], ["--tokens", "lots"]]
)
def test_bad_options_exit_2(bad) -> None:
    with pytest.raises(SystemExit) as e:
        jax_suite.parse_args(bad)
    assert e.value.code == 2
