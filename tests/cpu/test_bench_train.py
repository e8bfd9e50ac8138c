"""`python -m gshmem.bench train`'s options and its averaging (the run itself needs GPUs)."""

from __future__ import annotations

import pytest

from gshmem.bench import train


def test_options() -> None:
    o = train.parse_args(["--seq", "128K", "--layers", "2", "--np", "2", "--backend", "nccl"])
    assert o.seq == 131072 and o.layers == 2 and o.nprocs == 2 and o.backend == "nccl"
    assert train.parse_args(["--np", "4"]).seq == 65536


@pytest.mark.parametrize("bad", [["--steps", "2"], ["--seq", "1004", "--np", "4"],
                                 ["--backend", "mpi"], ["--layers", "0"]])  # fmt: skip
def test_bad_options_exit_2(bad) -> None:
    with pytest.raises(SystemExit) as e:
        train.parse_args(bad)
    assert e.value.code == 2


def test_summary_averages_steps_3_on() -> None:
    s = train.summarize([9.0, 5.0, 2.0, 4.0], flops_per_step=6e12, gpus=2)
    assert s["step_s"] == pytest.approx(3.0)  # steps 3 and 4 only, as the seeds averaged
    assert s["tflops_per_gpu"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="no step"):
        train.summarize([1.0, 1.0], 1.0, 1)
