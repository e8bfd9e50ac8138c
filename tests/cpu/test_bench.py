"""CPU tests of `python -m gshmem.bench p2p`: options, size ranges, the arithmetic, the report
(table, JSON, &&&& PERF lines), the NVSHMEM output parser, that the kernels compile, and that a
host without GPUs gets a clear message and a non-zero exit."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import gshmem
from gshmem import _ucx
from gshmem.bench import __main__ as cli
from gshmem.bench import nvshmem, options, p2p, report
from gshmem.bench.report import Row

ROOT = Path(__file__).resolve().parents[2]


# -- options --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,value",
    [
        ("8", 8),
        ("64K", 65536),
        ("1M", 1 << 20),
        ("1MiB", 1 << 20),
        ("1m", 1 << 20),
        ("2G", 2 << 30),
    ],  # fmt: skip
)
def test_parse_size(text, value):
    assert options.parse_size(text) == value


@pytest.mark.parametrize("text", ["", "x", "1X", "-4", "0"])
def test_parse_size_rejects(text):
    with pytest.raises(argparse.ArgumentTypeError, match="not a size|must be positive"):
        options.parse_size(text)


def test_size_range_follows_perftest():
    assert options.size_range(1 << 20, 256 << 20, 16) == [1 << 20, 16 << 20, 256 << 20]
    assert options.size_range(8, 64, 2) == [8, 16, 32, 64]
    assert options.size_range(8, 100, 4) == [8, 32]  # stops before passing -e
    assert options.size_range(4, 4, 2) == [4]
    for bad in ((0, 8, 2), (16, 8, 2), (8, 64, 1)):
        with pytest.raises(ValueError):
            options.size_range(*bad)


def test_defaults_and_quick():
    o = options.parse_args([])
    assert (o.min_size, o.max_size, o.factor) == (1 << 20, 256 << 20, 2)
    assert (o.iters, o.warmup, o.repeats) == (20, 5, 5)
    assert o.scopes == ["thread", "warp", "block"] and o.directions == ["uni", "bidir"]
    assert o.compare == [] and not o.perf_lines and o.nprocs == 2
    assert (8, 1024) in o.configs("block") and (4, 1024) in o.configs("block")  # <= 8 SMs
    q = options.parse_args(["--quick"])
    assert q.sizes() == [1 << 20, 16 << 20, 256 << 20]
    assert q.timeout < 180 and q.repeats <= 3 and len(q.configs("block")) == 2
    assert q.configs("thread") == [(32, 1024)]
    proxy = options.parse_args(["--quick", "--path", "proxy"])
    assert proxy.configs("thread") == proxy.configs("warp") == [options.PROXY_CONFIG]
    assert proxy.configs("block") == q.configs("block")
    assert q.rate_configs() == [(32, 1024)] and (8, 1024) in o.rate_configs()
    # the rate rows through the proxy keep to a few threads whatever -c/-t give the bw rows
    sized = ["--path", "proxy", "-c", "1,8", "-t", "1024"]
    assert options.parse_args(sized).rate_configs() == [options.PROXY_CONFIG]
    assert options.parse_args(sized[2:]).rate_configs() == [(1, 1024), (8, 1024)]
    # a quick proxy run: block scope, one direction, unless asked otherwise
    assert (proxy.scopes, proxy.directions) == (["block"], ["uni"])
    asked = options.parse_args(["--quick", "--path", "proxy", "--scope", "all", "--dir", "bidir"])
    assert (asked.scopes, asked.directions) == (["thread", "warp", "block"], ["bidir"])
    assert (q.scopes, q.directions) == (["thread", "warp", "block"], ["uni", "bidir"])


def test_perftest_options():
    o = options.parse_args(
        "-b 8 -e 1K -f 4 -n 7 -w 0 -c 4,8 -t 256 --scope warp,block --dir bidir".split()
        + ["--compare", "all", "--json", "x.json", "--perf-lines", "--only", "device_bw,rate"]
    )
    assert o.sizes() == [8, 32, 128, 512]
    assert (o.iters, o.warmup) == (7, 0)
    assert o.configs("warp") == [(4, 256), (8, 256)] == o.configs("block")
    assert o.scopes == ["warp", "block"] and o.directions == ["bidir"]
    assert o.compare == ["copy_engine", "nccl", "nvshmem"]
    assert o.json == "x.json" and o.perf_lines and o.tests == ["device_bw", "rate"]


@pytest.mark.parametrize(
    "argv",
    [
        ["--scope", "grid"],
        ["--dir", "sideways"],
        ["--compare", "mpi"],
        ["--only", "everything"],
        ["-b", "2M", "-e", "1M"],
        ["-f", "1"],
        ["-t", "100"],
        ["-n", "0"],
        ["--np", "1"],
        ["-b", "lots"],
        ["--path", "carrier-pigeon"],
    ],
)
def test_bad_options_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as e:
        options.parse_args(argv)
    assert e.value.code == 2
    assert "error" in capsys.readouterr().err


def test_proxy_path_option_and_its_environment(monkeypatch, capsys):
    assert options.parse_args([]).path == "direct"
    o = options.parse_args(["--path", "proxy"])
    assert o.path == "proxy"
    # inside a launched job the ranks must already have the proxy path's environment
    for k in options.PROXY_ENV:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("GSHMEM_TRANSPORT", "p2p")
    assert p2p.run(o) == 2
    err = capsys.readouterr().err
    assert "GSHMEM_TRANSPORT=proxy" in err and "NCCL_P2P_DISABLE=1" in err, err


def test_rotation_and_iterations():
    assert options.slots_for(1 << 20) == 256 and options.slots_for(256 << 20) == 1
    assert options.slots_for(32 << 20) * (32 << 20) >= 4 * (60 << 20)  # working set beyond L2
    assert options.slots_for(8) == options.MAX_SLOTS
    assert options.iters_for(256 << 20, 20) == 20
    assert options.iters_for(1 << 20, 20) == 256  # >= 256 MiB per timed region
    assert options.iters_for(8, 20) == options.MAX_ITERS_PER_REPEAT


def test_environment_sets_and_restores(monkeypatch):
    """options.environment: the block sees the values; afterwards a variable that was set has
    its old value again and one that was not is gone, also when the block raises."""
    monkeypatch.setenv("GSHMEM_TEST_ENV_A", "old")
    monkeypatch.delenv("GSHMEM_TEST_ENV_B", raising=False)
    with pytest.raises(RuntimeError):
        with options.environment({"GSHMEM_TEST_ENV_A": "new", "GSHMEM_TEST_ENV_B": "1"}):
            assert os.environ["GSHMEM_TEST_ENV_A"] == "new"
            assert os.environ["GSHMEM_TEST_ENV_B"] == "1"
            raise RuntimeError
    assert os.environ["GSHMEM_TEST_ENV_A"] == "old"
    assert "GSHMEM_TEST_ENV_B" not in os.environ


def test_nvshmem_args_mirror_the_options():
    o = options.parse_args(["--quick", "--scope", "block", "--dir", "uni", "-n", "7", "-w", "3",
                            "--repeats", "5"])  # fmt: skip
    args = nvshmem.nvshmem_args(o)
    at = {args[i]: args[i + 1] for i in range(0, len(args), 2)}
    assert at["-b"] == str(1 << 20) and at["-e"] == str(256 << 20) and at["-f"] == "16"
    assert at["--configs"] == "8x1024,32x1024" and at["--scopes"] == "block"
    assert at["--dirs"] == "uni" and at["--lat-sizes"] == "8,1024"
    assert (at["-n"], at["-w"], at["--repeats"]) == ("7", "3", "5")
    assert at["--lat-iters"] == "200" and at["--onstream"] == "1"
    args = nvshmem.nvshmem_args(options.parse_args(["--quick", "--only", "device_bw"]))
    assert args[args.index("--onstream") + 1] == "0"


# -- arithmetic -----------------------------------------------------------------------------------


def test_bandwidth_and_rates():
    assert report.bandwidth_gbps(400e9, 1.0) == pytest.approx(400.0)
    # 20 iterations of 256 MiB in 13.4 ms: bytes moved by one PE / time, GB = 1e9.
    assert report.bandwidth_gbps(20 * (256 << 20), 13.4e-3) == pytest.approx(400.6, rel=1e-3)
    assert report.rate_mops(32768 * 200, 5e-3) == pytest.approx(1310.72)
    with pytest.raises(ValueError):
        report.bandwidth_gbps(1, 0)
    assert report.median([3.0, 1.0, 2.0]) == 2.0 and report.median([1.0, 2.0]) == 1.5


def test_bus_bandwidth_factors_match_nccl_tests():
    assert report.bus_bandwidth(100.0, "all_reduce", 4) == pytest.approx(150.0)
    assert report.bus_bandwidth(100.0, "all_gather", 4) == pytest.approx(75.0)
    assert report.bus_bandwidth(100.0, "reduce_scatter", 2) == pytest.approx(50.0)
    assert report.bus_bandwidth(100.0, "sendrecv", 2) == 100.0
    with pytest.raises(ValueError):
        report.bus_bandwidth(1.0, "gather", 2)


# -- report ---------------------------------------------------------------------------------------


def sample_rows() -> list[Row]:
    mib = 1 << 20
    return [
        Row("gshmem", "put", "device", "GB/s", 400.0, 256 * mib, "block", 32, 1024, "uni", 32),
        Row("gshmem", "put", "on_stream", "GB/s", 390.0, 256 * mib, "-", 0, 0, "uni", 0, "graph"),
        Row("gshmem", "pingpong", "device", "us", 1.0, 8, "thread", 1, 1, "uni", 1),
        Row("gshmem", "get", "device", "GB/s", None, 256 * mib, "block", 8, 1024, "uni", 8),
        Row("copy_engine", "put", "host", "GB/s", 390.0, 256 * mib, sms=0),
        Row("nccl", "put", "host", "GB/s", 320.0, 256 * mib, note="send/recv"),
        Row("nvshmem", "put", "device", "GB/s", 372.0, 256 * mib, "block", 32, 1024, "uni"),
        # another configuration of the same size: the match keys on scope, CTAs and threads
        Row("nvshmem", "put", "device", "GB/s", 100.0, 256 * mib, "block", 8, 1024, "uni"),
        Row("nvshmem", "pingpong", "device", "us", 2.0, 8, "thread", 1, 1, "uni", 1),
    ]


def test_compare_matches_baselines_and_ratios():
    entries = report.compare(sample_rows(), report.BASELINES)
    by = {(e["row"].op, e["row"].path): e for e in entries}
    dev = by[("put", "device")]
    assert dev["copy_engine"] == (390.0, pytest.approx(400 / 390))
    assert dev["nccl"] == (320.0, pytest.approx(1.25))
    assert dev["nvshmem"] == (372.0, pytest.approx(400 / 372))
    stream = by[("put", "on_stream")]
    assert stream["copy_engine"][1] == pytest.approx(1.0) and stream["nvshmem"] is None
    assert by[("pingpong", "device")]["nvshmem"] == (2.0, pytest.approx(0.5))
    assert by[("pingpong", "device")]["copy_engine"] is None  # latency: no CE counterpart
    assert by[("get", "device")]["nccl"] is None  # NCCL has no get
    assert report.ratio(None, 1.0) is None and report.ratio(1.0, 0.0) is None


def test_table_side_by_side():
    rows = sample_rows() + [Row("nvshmem", "-", "-", "", None, note="skipped: no cmake")]
    text = report.format_table(rows, ["copy_engine", "nccl", "nvshmem"], title="T")
    lines = text.splitlines()
    assert lines[0] == "T"
    assert lines[1].split()[:9] == ["op", "path", "scope", "CTAsxthr", "SMs", "dir", "size",
                                    "gshmem", "unit"]  # fmt: skip
    put = next(ln for ln in lines if ln.startswith("put ") and "device" in ln)
    assert "32x1024" in put and "256M" in put and "400.0" in put
    assert "390.0 (1.03x)" in put and "320.0 (1.25x)" in put and "372.0 (1.08x)" in put
    assert any("2.000 (0.50x)" in ln for ln in lines)
    assert any(ln.startswith("get ") and " - " in ln for ln in lines)  # unmeasured: '-'
    assert "NVSHMEM: skipped: no cmake" in text
    assert "gshmem/baseline" in text
    # Baseline-only rows are not table rows.
    assert not any(ln.startswith("put ") and " host " in ln for ln in lines)
    # Columns line up: every cell of the header and the rows starts where its rule's dashes do.
    rule = lines[2]
    assert set(rule) == {"-", " "}
    starts = [i for i, ch in enumerate(rule) if ch == "-" and (i == 0 or rule[i - 1] == " ")]
    assert len(starts) == 13
    end = next(i for i, ln in enumerate(lines) if ln.startswith("baseline cells"))
    table = lines[1:2] + lines[3:end]  # the header and the four rows
    assert [ln.split()[0] for ln in table] == ["op", "put", "put", "pingpong", "get"]
    for ln in table:
        cells = [i for i, ch in enumerate(ln) if ch != " " and (i == 0 or ln[i - 1] == " ")]
        assert set(cells) >= {c for c in starts if c < len(ln.rstrip())}, ln


def test_table_without_baselines():
    text = report.format_table(sample_rows())
    assert "copy engine" not in text.splitlines()[0] and "400.0" in text


def test_fmt_size():
    assert [report.fmt_size(s) for s in (8, 1024, 1000, 3 << 20, 1 << 30)] == [
        "8", "1K", "1000", "3M", "1G"]  # fmt: skip


def test_json_round_trip():
    rows = sample_rows()
    doc = report.to_json(rows, {"gpu": "H200", "options": {"iters": 20}}, ["nvshmem"])
    parsed = json.loads(doc)
    assert parsed["suite"] == "p2p" and parsed["meta"]["gpu"] == "H200"
    assert len(parsed["rows"]) == len(rows)
    assert parsed["rows"][0]["value"] == 400.0 and parsed["rows"][0]["direction"] == "uni"
    ratios = {tuple(r["key"][:2]): r["nvshmem"] for r in parsed["ratios"]}
    assert ratios[("put", "device")] == pytest.approx(400 / 372)
    assert report.rows_from_json(doc) == rows


def test_perf_lines_round_trip():
    rows = [r for r in sample_rows() if r.value is not None]
    text = "\n".join(report.perf_line(r) for r in rows)
    assert all(line.startswith("&&&& PERF ") for line in text.splitlines())
    back = report.parse_perf_lines(text)
    for a, b in zip(rows, back, strict=True):
        fields = ("impl", "op", "path", "unit", "scope", "ctas", "threads", "direction", "size",
                  "sms")  # fmt: skip
        assert [getattr(a, f) for f in fields] == [getattr(b, f) for f in fields]
        assert b.value == pytest.approx(a.value)
    assert report.perf_line(Row("gshmem", "get", "device", "GB/s", None)) == ""


NVSHMEM_SAMPLE = "\n".join(
    [
        "nvshmem_p2p: NVSHMEM 3.4, 2 PEs, 132 SMs, 3 sizes",
        "&&&& PERF put 371.9042 GB/s impl=nvshmem path=device scope=block ctas=32 threads=1024 "
        "dir=uni size=268435456 sms=32",
        "&&&& PERF get 178.5000 GB/s impl=nvshmem path=device scope=block ctas=4 threads=1024 "
        "dir=bidir size=1048576 sms=4",
        "/opt/.../nvshmem_init.cpp: WARN: some unrelated line",
        "&&&& PERF put 395.1 GB/s impl=nvshmem path=on_stream scope=- ctas=0 threads=0 dir=uni "
        "size=268435456 sms=?",
        "&&&& PERF pingpong 2.0100 us impl=nvshmem path=device scope=thread ctas=1 threads=1 "
        "dir=uni size=8 sms=1",
        "nvshmem_p2p: done",
    ]
)


def test_parse_nvshmem_output():
    rows = report.parse_perf_lines(NVSHMEM_SAMPLE)
    assert len(rows) == 4
    put, get, stream, lat = rows
    assert put == Row("nvshmem", "put", "device", "GB/s", 371.9042, 268435456, "block", 32, 1024,
                      "uni", 32)  # fmt: skip
    assert get.direction == "bidir" and get.ctas == 4 and get.value == 178.5
    assert stream.path == "on_stream" and stream.sms is None
    assert lat.unit == "us" and lat.value == pytest.approx(2.01) and lat.size == 8
    # Lines forwarded by a launcher keep their prefix; impl can be forced.
    tagged = "[rank 0] " + NVSHMEM_SAMPLE.splitlines()[1]
    assert report.parse_perf_lines(tagged, impl="x")[0].impl == "x"


def test_parse_rejects_malformed_perf_line():
    with pytest.raises(ValueError, match="malformed PERF line"):
        report.parse_perf_lines("&&&& PERF put fast GB/s")


# -- command line and the GPU-less host -----------------------------------------------------------


def test_inside_job_detection():
    assert cli.inside_job({"GSHMEM_RANK": "0"})
    assert cli.inside_job({"RANK": "1", "WORLD_SIZE": "2"})
    assert cli.inside_job({"OMPI_COMM_WORLD_SIZE": "2"})
    assert not cli.inside_job({"RANK": "1"})
    assert not cli.inside_job({})


def test_relaunch_command():
    cmd = cli.relaunch_command("p2p", ["--quick", "-b", "8"], 2, 170.0)
    assert cmd[:4] == [sys.executable, "-m", "gshmem.run", "-n"]
    assert cmd[4:8] == ["2", "--timeout", "170", "--no-tag-output"]
    assert cmd[8:] == ["-m", "gshmem.bench", "p2p", "--quick", "-b", "8"]


def test_missing_gpus_give_a_clear_message(monkeypatch, capsys):
    for var in cli._JOB_VARS + ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(cli, "gpu_count", lambda: 1)
    assert cli.main(["p2p", "--quick"]) == 3
    err = capsys.readouterr().err
    assert "needs 2 CUDA GPUs" in err and "found 1" in err


@pytest.mark.skipif(gshmem.device_count() > 0, reason="checks the GPU-less path")
def test_cli_without_gpu_exits_non_zero():
    env = {k: v for k, v in __import__("os").environ.items() if k not in cli._JOB_VARS}
    proc = subprocess.run(
        [sys.executable, "-m", "gshmem.bench", "p2p", "--quick"],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert proc.returncode == 3, proc.stderr
    assert "needs 2 CUDA GPUs" in proc.stderr
    # Inside a job (as a rank) it says what is missing instead of failing obscurely.
    proc = subprocess.run(
        [sys.executable, "-m", "gshmem.bench", "p2p", "--quick"],
        capture_output=True, text=True, timeout=60, env={**env, "GSHMEM_RANK": "0"},
    )  # fmt: skip
    assert proc.returncode == 3 and "gshmem.bench:" in proc.stderr, proc.stderr


def test_cli_usage():
    assert cli.main([]) == 2
    assert cli.main(["--help"]) == 0
    assert cli.main(["allreduce"]) == 2


def test_nvshmem_build_skips_with_a_reason(monkeypatch, tmp_path):
    monkeypatch.setattr(nvshmem, "nvshmem_home", lambda: None)
    exe, why = nvshmem.build_nvshmem(tmp_path, lambda s: None)
    assert exe is None and "NVSHMEM not found" in why


# -- the kernels compile (NVRTC like CuPy; nvcc -c) -----------------------------------------------


def test_kernels_ship_inside_the_package():
    assert p2p.KERNELS.is_file() and p2p.KERNELS.parent.name == "bench"
    assert "GSHMEM_BENCH_BW(block, Block)" in p2p.KERNELS.read_text()


def test_device_bw_ops_and_their_kernel_modes():
    # through the proxy the non-blocking rows join (one quiet per launch); the mode bits are the
    # kernel's (kBwGet, kBwNbi in bench/kernels.cu)
    assert p2p.device_bw_ops("direct") == ("put", "get")
    assert p2p.device_bw_ops("proxy") == ("put", "get", "put_nbi", "get_nbi")
    modes = {op: p2p.bw_mode(op) for op in p2p.device_bw_ops("proxy")}
    assert modes == {"put": 0, "get": 1, "put_nbi": 2, "get_nbi": 3}
    source = p2p.KERNELS.read_text()
    assert "constexpr int kBwGet = 1;" in source and "constexpr int kBwNbi = 2;" in source


@pytest.mark.parametrize("arch", ["compute_80", "compute_90"])
def test_kernels_compile_with_nvrtc(arch):
    nvrtc = pytest.importorskip("test_device_nvrtc")
    if nvrtc.LIB is None:
        pytest.skip("libnvrtc not found (pip install nvidia-cuda-nvrtc)")
    options = [f"-I{gshmem.include_dir()}", "-std=c++17", f"--gpu-architecture={arch}"]
    rc, log = nvrtc.nvrtc_compile(p2p.KERNELS.read_text(), "kernels.cu", options)
    assert rc == 0, log


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found")
def test_kernels_compile_with_nvcc(tmp_path):
    proc = subprocess.run(
        ["nvcc", "-c", "-x", "cu", "-std=c++17", "-arch=sm_90", f"-I{gshmem.include_dir()}",
         str(p2p.KERNELS), "-o", str(tmp_path / "k.o")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr


def test_nvshmem_program_sources_present():
    assert (ROOT / "benchmarks" / "nvshmem_p2p" / "CMakeLists.txt").is_file()
    src = (ROOT / "benchmarks" / "nvshmem_p2p" / "nvshmem_p2p.cu").read_text()
    for needle in (
        "nvshmemx_set_attr_uniqueid_args",
        "nvshmemx_putmem_block",
        "nvshmemx_putmem_on_stream",
        "nvshmem_putmem_signal",
        "&&&& PERF",
    ):
        assert needle in src


@pytest.mark.skipif(_ucx.wheel_library() is None, reason="no UCX here (pip install libucx-cu13)")
def test_proxy_pingpong_measures_every_setting():
    """benchmarks/proxy_pingpong.py gives a time for each way of driving the proxy path and each
    transport setting, for puts as a UCX put and a signal and as one inline message (1 KiB);
    GPU memories without a GPU are skipped with a reason; an unknown memory or way is refused."""
    script = str(ROOT / "benchmarks" / "proxy_pingpong.py")
    memories = "host" if gshmem.device_count() else "host,gpu_sink"
    env = {**os.environ, "MEMORY": memories, "ITERS": "20", "BURSTS": "2"}

    def run(**more: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, script], env={**env, **more}, capture_output=True,
                              text=True, timeout=240)  # fmt: skip

    for put, size in (("put", "8"), ("inline", "1024")):
        out = run(PUT=put, BYTES=size)
        assert out.returncode == 0, out.stdout + out.stderr
        assert f"put_signal ({put}), {size} B" in out.stdout, out.stdout
        rows = [line.split() for line in out.stdout.splitlines() if line.startswith("host ")]
        assert len(rows) == 6, out.stdout  # 2 ways x 3 transport settings
        for row in rows:
            assert "failed" not in row, out.stdout
            assert float(row[-7]) > 0 and float(row[-6]) > 0, row  # one way, burst
        if gshmem.device_count() == 0:
            assert "gpu_sink skipped: no GPU here" in out.stdout
    bad = run(MEMORY="host,vram")
    assert bad.returncode != 0 and "unknown ['vram']" in bad.stderr
    for more in ({"PUT": "rdma"}, {"PUT": "inline", "BYTES": "2048"}):
        bad = run(**more)
        assert bad.returncode != 0 and "PUT must be one of" in bad.stderr, more
