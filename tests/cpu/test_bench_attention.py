"""CPU tests of `python -m gshmem.bench attention`: options, the FLOP convention, the iteration
schedule, sizes, rows and efficiency, the correctness tolerance, the table, the JSON, the plot
data (and the plot where matplotlib is installed), and the CLI wiring (no GPU -> clear exit)."""

from __future__ import annotations

import json
import sys

import pytest

from gshmem.bench import __main__ as cli
from gshmem.bench import attention as att
from gshmem.bench import report

K, M = 1 << 10, 1 << 20


# -- options --------------------------------------------------------------------------------------
def test_default_options_are_the_issue_s_sweep():
    o = att.parse_args(["--np", "2"])
    assert o.tokens == [1 * K, 2 * K, 4 * K, 8 * K, 16 * K, 32 * K, 64 * K, 128 * K]
    assert o.total == M and o.masks == ["causal", "noncausal"] and o.modes == ["fwd", "fwdbwd"]
    assert (
        o.compare == ["gshmem", "gshmem_ring", "gshmem_heads", "nccl", "torch_cp", "ideal"]
        and o.nprocs == 2
    )
    assert (o.iters, o.warmup, o.repeats, o.timeout) == (20, 3, 5, 3600.0)


def test_quick_options():
    q = att.parse_args(["--quick", "--np", "4"])
    assert q.tokens == [2 * K, 8 * K, 32 * K] and q.total is None
    assert q.masks == ["causal"] and q.modes == ["fwd", "fwdbwd"] and q.quick
    assert (q.iters, q.warmup, q.repeats, q.timeout, q.nprocs) == (5, 2, 3, 480.0, 4)
    # an explicit option wins over --quick's
    q2 = att.parse_args(["--quick", "--np", "2", "--causal", "both", "--iters", "7"])
    assert q2.masks == ["causal", "noncausal"] and q2.iters == 7


def test_option_lists():
    o = att.parse_args(["--np", "2", "--tokens", "4K,64k", "--total", "none", "--mode", "fwd",
                        "--causal", "noncausal", "--compare", "gshmem,ideal", "--json", "x.json",
                        "--plot", "p.png", "--max-call-s", "5"])  # fmt: skip
    assert o.tokens == [4 * K, 64 * K] and o.total is None
    assert o.modes == ["fwd"] and o.masks == ["noncausal"] and o.compare == ["gshmem", "ideal"]
    assert (o.json, o.plot, o.max_call_s) == ("x.json", "p.png", 5.0)
    only_total = att.parse_args(["--np", "8", "--tokens", "none", "--total", "2M"])
    assert only_total.tokens == [] and only_total.total == 2 * M


def test_np_defaults_to_the_visible_gpus(monkeypatch):
    monkeypatch.setattr(cli, "gpu_count", lambda: 8)
    assert att.parse_args([]).nprocs == 8
    monkeypatch.setattr(cli, "gpu_count", lambda: 0)  # no GPU: at least 2 (main then exits 3)
    assert att.parse_args([]).nprocs == 2


@pytest.mark.parametrize(
    "bad",
    [["--compare", "mpi"], ["--causal", "maybe"], ["--mode", "bwd"], ["--np", "1"],
     ["--tokens", "3"], ["--tokens", "1X"], ["--total", "lots"], ["--iters", "0"],
     ["--repeats", "0"], ["--max-call-s", "0"], ["--tokens", "none", "--total", "none"]],
)  # fmt: skip
def test_bad_options_exit_2(bad):
    with pytest.raises(SystemExit) as e:
        att.parse_args(["--np", "2", *bad])
    assert e.value.code == 2


def test_columns_follow_compare():
    assert att.columns(att.IMPLS) == ["gshmem", "gshmem:ring", "gshmem:heads", "nccl",
                                      "torch_cp:allgather", "torch_cp:alltoall",
                                      "ideal"]  # fmt: skip
    assert att.columns(["gshmem_ring"]) == ["gshmem:ring"]
    assert att.comm_label("gshmem:ring") == (0, "0 (copy engine)")
    assert att.columns(["ideal", "nccl"]) == ["nccl", "ideal"]
    assert att.columns(["torch_cp"]) == ["torch_cp:allgather", "torch_cp:alltoall"]


# -- arithmetic -----------------------------------------------------------------------------------
def test_flops_convention():
    s = 64 * K
    fwd = 4 * 1 * 32 * s * s * 128  # 4·B·Hq·S²·D
    assert att.attention_flops(s, False, "fwd") == fwd
    assert att.attention_flops(s, True, "fwd") == fwd / 2
    assert att.attention_flops(s, True, "fwdbwd") == 3.5 * fwd / 2
    assert att.attention_flops(s, False, "fwdbwd") == 3.5 * fwd
    assert att.tflops_per_gpu(8e12, 4, 0.5) == pytest.approx(4.0)
    with pytest.raises(ValueError):
        att.tflops_per_gpu(1.0, 2, 0.0)


def test_schedule_caps_long_calls():
    from gshmem.bench.timing import schedule

    assert schedule(1e-5, 20, 3, 5) == (3, 20, 5)  # short: every option as given
    assert schedule(0.1, 20, 3, 5) == (3, 5, 5)  # ~0.5 s per repeat
    assert schedule(3.0, 20, 3, 5) == (1, 1, 3)  # ~10 s of repeats
    assert schedule(40.0, 20, 3, 5) == (1, 1, 1)  # one warm-up call, one timed call
    assert schedule(1e-5, 20, 0, 5)[0] == 1  # the first call always warms up


def test_ideal_bytes():
    assert att.ideal_bytes(1, "fwd") == (32 + 8 + 8 + 32) * 128 * 2
    assert att.ideal_bytes(M, "fwdbwd") == M * (2 * 80 * 256 + 32 * 4)
    assert att.ideal_bytes(M, "fwdbwd") / 2**30 == pytest.approx(40.125)


def test_plan_sizes():
    plan, notes = att.plan_sizes([1 * K, 128 * K], M, 2)
    assert plan == [(1 * K, 2 * K), (128 * K, 256 * K), (512 * K, M)] and notes == []
    plan, _ = att.plan_sizes([128 * K], M, 8)  # 1M over 8 GPUs is 128K each: measured once
    assert plan == [(128 * K, M)]
    plan, notes = att.plan_sizes([2 * K], 1000, 3)
    assert plan == [(2 * K, 6 * K)] and "not a multiple" in notes[0]
    assert att.plan_sizes([], M, 4)[0] == [(256 * K, M)]


def test_comm_label():
    assert att.comm_label("gshmem") == (0, "0 (copy engine)")
    assert att.comm_label("ideal")[0] is None
    sms, text = att.comm_label("nccl", {"NCCL_MAX_NCHANNELS": "8"})
    assert sms is None and text == "NCCL kernels (send/recv; NCCL_MAX_NCHANNELS=8)"
    assert "all_gather" in att.comm_label("torch_cp:allgather", {})[1]
    assert att.comm_label("torch_cp:alltoall", {})[1] == "NCCL kernels (all_to_all)"


def test_check_close():
    assert att.check_close([("out", 0.01, 3.0), ("dq", 0.5, 40.0)]) == ""  # 0.5 <= 2e-2 x 40
    why = att.check_close([("out", 0.05, 0.5), ("dk", 1.0, 10.0)])
    assert "out 0.05" in why and "dk 1" in why
    assert att.check_close([("out", float("nan"), 1.0)]) != ""  # NaN never passes
    assert att.check_close([("out", 0.015, 0.5)]) == ""  # small outputs: 2e-2 x max(1, |ref|)
    assert att.check_close([("x", 0.02, 1.0)]) == ""  # at the line itself


# -- rows, table, JSON, plot ----------------------------------------------------------------------
def _rows(world: int = 2) -> list[report.Row]:
    """causal fwd+bwd at 8K/GPU: ideal 10 ms on one GPU (5 ms / W), gshmem 5.5 ms, nccl 8 ms,
    torch_cp failed; plus a causal fwd size with no ideal (the whole sequence did not fit)."""
    args = (8 * K, 8 * K * world, world, True, "fwdbwd")
    return [
        att.make_row("gshmem", *args, 5.5e-3, sched=(3, 20, 5)),
        att.make_row("nccl", *args, 8e-3),
        att.make_row("torch_cp:allgather", *args, None, note="error: RuntimeError: boom"),
        att.make_row("ideal", *args, 10e-3),
        att.make_row("gshmem", 512 * K, M, world, True, "fwd", 2.0),
        att.make_row("ideal", 512 * K, M, world, True, "fwd", None, note="does not fit"),
    ]


def test_rows_and_efficiency():
    rows = _rows()
    g, n, t, i = rows[:4]
    assert (g.op, g.unit, g.size, g.sms, g.path) == ("causal_fwdbwd", "ms", 8 * K, 0, "on_stream")
    assert g.value == pytest.approx(5.5) and i.value == pytest.approx(5.0)  # ideal: time / W
    assert i.extra["single_gpu_ms"] == pytest.approx(10.0)
    flops = att.attention_flops(16 * K, True, "fwdbwd")
    assert g.extra["tflops"] == pytest.approx(flops / 2 / 5.5e-3 / 1e12)
    assert i.extra["tflops"] == pytest.approx(flops / 10e-3 / 1e12)  # one GPU's rate
    assert t.value is None and "tflops" not in t.extra and g.extra["schedule"] == [3, 20, 5]
    att.add_efficiency(rows)
    assert g.extra["eff"] == pytest.approx(100 * 5 / 5.5) and n.extra["eff"] == pytest.approx(62.5)
    assert i.extra["eff"] == pytest.approx(100.0) and "eff" not in t.extra
    assert "eff" not in rows[4].extra  # no ideal at that size: no efficiency, none invented


def test_table():
    cols = att.columns(att.IMPLS)
    text = att.format_table(_rows(), cols, title="T")
    lines = text.splitlines()
    assert lines[0] == "T"
    assert any(line.startswith("causal, forward+backward:") for line in lines)
    header = next(line for line in lines if "tokens/GPU" in line)
    assert all(c in header for c in cols)
    row8k = next(line for line in lines if line.strip().startswith("8K"))
    assert "16K" in row8k and "5.500 / " in row8k and "/ 91%" in row8k and "/ 62%" in row8k
    assert "-*" in row8k  # torch_cp failed: a dash pointing at the notes
    row1m = next(line for line in lines if "512K" in line)
    assert "1M" in row1m and "2000.0 / " in row1m and "%" not in row1m
    at = lines.index("comm SMs (the SMs the communication occupies):")
    assert lines[at + 1 : at + 5] == [
        "  gshmem: 0 (copy engine)",
        "  gshmem:ring: 0 (copy engine)",
        "  gshmem:heads: 0 (copy engine)",
        "  nccl: NCCL kernels (send/recv)",
    ]
    assert "* torch_cp:allgather [8K causal_fwdbwd]: error: RuntimeError: boom" in lines
    assert "* ideal [512K causal_fwd]: does not fit" in lines


def test_json_round_trip():
    rows = _rows()
    att.add_efficiency(rows)
    meta = {"gpu": "H100", "plot": att.plot_series(rows)}
    doc = json.loads(report.to_json(rows, meta, (), suite="attention"))
    assert doc["suite"] == "attention" and doc["meta"]["gpu"] == "H100"
    back = report.rows_from_json(json.dumps(doc))
    assert [r.impl for r in back] == [r.impl for r in rows]
    assert back[0].extra["eff"] == pytest.approx(100 * 5 / 5.5) and back[0].extra["total"] == 16 * K
    assert doc["meta"]["plot"]["gshmem"] == [[8 * K, pytest.approx(100 * 5 / 5.5)]]


def test_plot_series():
    rows = _rows()
    rows.append(att.make_row("gshmem", 2 * K, 4 * K, 2, True, "fwdbwd", 1e-3))
    rows.append(att.make_row("ideal", 2 * K, 4 * K, 2, True, "fwdbwd", 1e-3))
    series = att.plot_series(rows)
    assert set(series) == {"gshmem", "nccl", "torch_cp:allgather"}  # one line per column
    assert series["gshmem"] == [(2 * K, pytest.approx(50.0)), (8 * K, pytest.approx(90.909, 1e-3))]
    assert series["torch_cp:allgather"] == []  # failed: no point
    assert att.plot_series(rows, op="causal_fwd") == {"gshmem": []}


def test_write_plot(tmp_path, monkeypatch):
    series = att.plot_series(_rows())
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    assert "matplotlib" in att.write_plot(series, tmp_path / "p.png", "t")
    monkeypatch.undo()
    pytest.importorskip("matplotlib")
    assert att.write_plot({"gshmem": []}, tmp_path / "none.png", "t") != ""
    path = tmp_path / "sub" / "eff.png"
    assert att.write_plot(series, path, "t") == ""
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# -- the command line ------------------------------------------------------------------------------
def test_cli_lists_the_suite_and_needs_gpus(monkeypatch, capsys):
    assert "attention" in cli.SUITES
    monkeypatch.setattr(cli, "gpu_count", lambda: 0)
    for k in ("GSHMEM_RANK", "RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"):
        monkeypatch.delenv(k, raising=False)
    assert cli.main(["attention", "--quick"]) == 3
    assert "needs 2 CUDA GPUs" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        cli.main(["attention", "--compare", "mpi"])
    assert e.value.code == 2


def test_import_needs_no_torch_or_gpu():
    import subprocess

    code = ("import sys; sys.modules['torch'] = None; import gshmem.bench.attention as a; "
            "print(a.columns(['ideal']))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "['ideal']", out.stderr


def test_write_results(tmp_path, capsys):
    o = att.parse_args(["--np", "2", "--json", str(tmp_path / "r.json")])
    rows, cols = _rows(), att.columns(att.IMPLS)
    meta = {"gpu": "H100", "nranks": 2, "notes": ["--total 7: not measured"], "check_failed": True}
    att.write_results(o, rows, cols, meta)
    out = capsys.readouterr().out
    assert out.index("results written to") < out.index("causal, forward+backward")  # table last
    assert "--total 7: not measured" in out and "CHECK FAILED" in out
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["suite"] == "attention" and doc["meta"]["plot"]["nccl"] == [[8 * K, 62.5]]
    assert len(doc["rows"]) == len(rows)
