"""CPU tests of `python -m gshmem.bench coll`: options, nccl-tests' counts and bus-bandwidth
factors, the table, the JSON, and the CLI wiring (suite listed; no GPU -> clear exit)."""

from __future__ import annotations

import json

import pytest

from gshmem.bench import __main__ as cli
from gshmem.bench import coll, options, report


def test_bus_factors_are_nccl_tests():
    for op, f in (("all_reduce", 2 * 3 / 4), ("all_gather", 3 / 4), ("reduce_scatter", 3 / 4),
                  ("all_to_all", 3 / 4)):  # fmt: skip
        r = coll.make_row("gshmem", op, 1 << 20, 1 << 19, "bfloat16", "sum", 1e-5, 4)
        assert r.value == pytest.approx(10.0)
        assert r.extra["algbw"] == pytest.approx((1 << 20) / 1e-5 / 1e9)
        assert r.extra["busbw"] == pytest.approx(r.extra["algbw"] * f)
    assert coll.make_row("gshmem", "all_gather", 8, 4, "bfloat16", "sum", 1e-6, 2).extra[
        "redop"] == "none"  # fmt: skip
    shift = coll.make_row("gshmem", "permute", 1 << 20, 1 << 19, "bfloat16", "sum", 1e-5, 4)
    assert shift.extra["busbw"] == pytest.approx(shift.extra["algbw"])  # sendrecv's factor 1
    assert shift.extra["redop"] == "none"
    assert coll.count_for("permute", 1000, "bfloat16", 3) == 500  # no per-rank blocks


def test_counts_follow_nccl_tests():
    assert coll.count_for("all_reduce", 1 << 20, "bfloat16", 4) == 1 << 19
    assert coll.count_for("all_gather", 8, "float", 4) == 4  # at least one element per rank
    assert coll.count_for("reduce_scatter", 1000, "bfloat16", 3) == 498
    assert coll.count_for("all_reduce", 1, "int64", 4) == 1


def test_options():
    o = coll.parse_args([])
    assert (o.min_size, o.max_size, o.factor, o.dtype, o.nprocs) == (8, 256 << 20, 2, "bfloat16", 4)
    q = coll.parse_args(["--quick", "--compare", "all", "--only", "all_reduce"])
    assert q.sizes() == [8, 128, 2048, 32768, 1 << 19, 8 << 20, 128 << 20]
    assert q.compare == ["nccl", "torch_symm"] and q.ops == ["all_reduce"]
    assert "permute" in o.ops and coll.parse_args(["--only", "permute"]).ops == ["permute"]
    assert o.buffers == "symmetric" and coll.parse_args(["--buffers", "device"]).buffers == "device"
    bad_args = (["--compare", "mpi"], ["-d", "double"], ["-o", "avg"], ["--np", "1"],
                ["--buffers", "host"])  # fmt: skip
    for bad in bad_args:
        with pytest.raises(SystemExit) as e:
            coll.parse_args(bad)
        assert e.value.code == 2


def test_proxy_path_option_and_its_environment(monkeypatch, capsys):
    # --path proxy: the launcher sets the proxy path's environment; a rank without it refuses
    assert coll.parse_args([]).path == "direct"
    o = coll.parse_args(["--path", "proxy", "--only", "all_gather"])
    assert o.path == "proxy"
    for k in options.PROXY_ENV:
        monkeypatch.delenv(k, raising=False)
    assert coll.run(o) == 2
    err = capsys.readouterr().err
    assert "GSHMEM_TRANSPORT=proxy" in err and "NCCL_SHM_DISABLE=1" in err, err
    with pytest.raises(SystemExit):
        coll.parse_args(["--path", "carrier-pigeon"])


def test_table_and_json():
    rows = [coll.make_row("gshmem", "all_reduce", 1 << 20, 1 << 19, "bfloat16", "sum", 10e-6, 4,
                          algo="gshmem two_shot"),
            coll.make_row("nccl", "all_reduce", 1 << 20, 1 << 19, "bfloat16", "sum", 20e-6, 4),
            coll.make_row("torch_symm", "all_reduce", 1 << 20, 0, "bfloat16", "sum", None, 4,
                          note="torch.ops.symm_mem unavailable")]  # fmt: skip
    text = coll.format_table(rows, ["nccl", "torch_symm"], title="t")
    lines = text.splitlines()
    assert lines[0] == "t" and "busbw" in lines[1] and "xnccl" in lines[1]
    assert "2.00" in lines[2] and "gshmem two_shot" in lines[2]
    # the baseline's own cells: 20 us, busbw 2 x (4 - 1) / 4 x 1 MiB / 20 us = 78.64 GB/s
    assert lines[2].split()[-6:-3] == ["20.00", "78.64", "2.00"], lines[2]  # then torch_symm
    assert "torch_symm all_reduce: torch.ops.symm_mem unavailable" in text
    doc = json.loads(report.to_json(rows, {"gpu": "x"}, (), suite="coll"))
    assert doc["suite"] == "coll" and len(report.rows_from_json(json.dumps(doc))) == 3


def test_cli_lists_the_suite_and_needs_gpus(monkeypatch, capsys):
    assert "coll" in cli.SUITES
    monkeypatch.setattr(cli, "gpu_count", lambda: 0)
    for k in ("GSHMEM_RANK", "RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"):
        monkeypatch.delenv(k, raising=False)
    assert cli.main(["coll", "--quick"]) == 3
    assert "needs 4 CUDA GPUs" in capsys.readouterr().err
    assert cli.relaunch_command("coll", ["--quick"], 4, 300)[-3:] == ["gshmem.bench", "coll",
                                                                       "--quick"]  # fmt: skip
