"""`python -m gshmem.bench train`'s options and its averaging (the run itself needs GPUs)."""

from __future__ import annotations

import json

import pytest

from gshmem.bench import train
from gshmem.train.config import LLAMA3_8B
from gshmem.train.flops import train_flops


def test_options() -> None:
    o = train.parse_args(["--seq", "128K", "--layers", "2", "--np", "2", "--backend", "nccl"])
    assert o.seq == 131072 and o.layers == 2 and o.nprocs == 2 and o.backend == "nccl"
    assert train.parse_args(["--np", "4"]).seq == 65536
    assert o.framework == "torch" and getattr(o, "layout", None) is None  # relaunched per GPU
    j = train.parse_args(["--framework", "jax", "--np", "2"])
    assert j.framework == "jax" and j.layout == "one"  # one process drives every GPU
    assert train.model_config(o).vocab == 128256 and train.model_config(o).layers == 2
    t = train.parse_args(["--data", "text", "--seq", "1K", "--np", "2", "--layers", "3"])
    assert train.model_config(t).vocab == 256  # bytes
    tokens, labels = next(train.batches(t, 256))
    assert tokens.shape == (1, 1024) and int(tokens.max()) < 256
    tokens, _ = next(train.batches(o, train.model_config(o).vocab))
    assert tokens.shape == (1, 131072)  # the synthetic stream
    assert train.parse_args(["--np", "2", "--backend", "torch_cp"]).backend == "torch_cp"
    assert o.keep_attention == 0
    assert train.parse_args(["--np", "2", "--keep-attention", "24"]).keep_attention == 24
    assert train.parse_args(["--framework", "jax", "--np", "2", "--keep-attention", "8"]
                            ).keep_attention == 8  # fmt: skip
    assert not o.compile and train.parse_args(["--np", "2", "--compile"]).compile


@pytest.mark.parametrize("bad", [["--steps", "2"], ["--seq", "1004", "--np", "4"],
                                 ["--backend", "mpi"], ["--layers", "0"],
                                 ["--framework", "tf"], ["--data", "web"],
                                 ["--framework", "jax", "--backend", "torch_cp"],
                                 ["--keep-attention", "33"], ["--keep-attention", "-1"],
                                 ["--keep-attention", "2", "--no-checkpoint"],
                                 ["--framework", "jax", "--compile"]])  # fmt: skip
def test_bad_options_exit_2(bad) -> None:
    with pytest.raises(SystemExit) as e:
        train.parse_args(bad)
    assert e.value.code == 2


def test_summary_averages_steps_3_on() -> None:
    s = train.summarize([9.0, 5.0, 1.0, 2.0, 6.0], flops_per_step=6e12, gpus=2)
    # the mean of steps 3 on, as the seeds averaged (their median is 2, from step 2 on 3.5)
    assert s["step_s"] == pytest.approx(3.0)
    assert s["tflops_per_gpu"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="no step"):
        train.summarize([1.0, 1.0], 1.0, 1)


def test_report_counts_flops_per_gpu_and_writes_json(tmp_path, capsys) -> None:
    o = train.parse_args(["--seq", "8K", "--layers", "2", "--np", "2", "--steps", "5",
                          "--batch", "2", "--json", str(tmp_path / "t.json")])  # fmt: skip
    seconds = [9.0, 5.0, 1.0, 2.0, 6.0]
    # the run's own GPU count (4), not --np's: the row reports what ran
    row = train.report(o, {"framework": "jax", "gpus": 4, "losses": [11.0, 10.5, 10.0, 9.5, 9.0],
                           "seconds": seconds, "peak_gib": 7.5})  # fmt: skip
    flops = train_flops(LLAMA3_8B.with_layers(2), 2, 8192)  # two sequences of 8K
    assert row["step_s"] == pytest.approx(3.0)
    assert row["tflops_per_gpu"] == pytest.approx(flops / 4 / 3.0 / 1e12)
    assert json.loads((tmp_path / "t.json").read_text()) == row
    assert row["framework"] == "jax" and row["cp"] == 4 and row["step_seconds"] == seconds
    assert "(jax): 8192 tokens, 2 layers, CP=4, gshmem" in capsys.readouterr().out
    assert row["keep_attention"] == 0 and row["compile"] is False


def test_progress_says_each_step_on_stderr(capsys) -> None:
    train.progress(3, 20, 4.6126, 11.93456)
    got = capsys.readouterr()
    assert got.out == "" and got.err == "gshmem.bench train: step 3/20: 4.613 s, loss 11.9346\n"
