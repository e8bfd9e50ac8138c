"""The NVSHMEM baseline: builds benchmarks/nvshmem_p2p against the NVSHMEM wheel (where it is
installed) and runs it as 2 processes, so its figures sit beside gshmem's in one table."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from gshmem.bench.options import Options
from gshmem.bench.report import Row, parse_perf_lines

NVSHMEM_DIR = Path(__file__).resolve().parents[3] / "benchmarks" / "nvshmem_p2p"


def nvshmem_home() -> str | None:
    """The NVSHMEM wheel's folder (site-packages/nvidia/nvshmem), or NVSHMEM_HOME."""
    if os.environ.get("NVSHMEM_HOME"):
        return os.environ["NVSHMEM_HOME"]
    try:
        import importlib.util

        spec = importlib.util.find_spec("nvidia.nvshmem")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def nvshmem_args(o: Options) -> list[str]:
    """The comparison program's options for the same measurements as ``o``."""
    configs = sorted({c for s in o.scopes for c in o.configs(s)})
    return [
        "-b", str(o.min_size), "-e", str(o.max_size), "-f", str(o.factor),
        "-n", str(o.iters), "-w", str(o.warmup), "--repeats", str(o.repeats),
        "--configs", ",".join(f"{c}x{t}" for c, t in configs),
        "--scopes", ",".join(o.scopes), "--dirs", ",".join(o.directions),
        "--lat-sizes", ",".join(str(s) for s in o.latency_sizes),
        "--lat-iters", str(o.latency_iters),
        "--onstream", "1" if "onstream_bw" in o.tests else "0",
    ]  # fmt: skip


def build_nvshmem(
    build_dir: Path, log: Callable[[str], None], limit: float = 300.0
) -> tuple[Path | None, str]:
    """Configures and builds benchmarks/nvshmem_p2p (cached by source digest); returns the
    program, or None and why not."""
    if not (NVSHMEM_DIR / "CMakeLists.txt").is_file():
        return None, f"{NVSHMEM_DIR} not found (needs the gshmem source tree)"
    home = nvshmem_home()
    if home is None:
        return None, "NVSHMEM not found (pip wheel nvidia-nvshmem-cu13, or set NVSHMEM_HOME)"
    cmake = shutil.which("cmake")
    if cmake is None:
        return None, "cmake not found"
    digest = hashlib.sha256()
    for f in sorted(NVSHMEM_DIR.iterdir()):
        digest.update(f.read_bytes())
    build = build_dir / digest.hexdigest()[:12]
    exe = build / "nvshmem_p2p"
    if exe.is_file():
        return exe, ""
    log(f"building the NVSHMEM comparison program in {build} ...")
    steps = [
        [cmake, "-S", str(NVSHMEM_DIR), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
         f"-DNVSHMEM_HOME={home}", f"-DPython3_EXECUTABLE={sys.executable}"],
        [cmake, "--build", str(build), "-j", "8"],
    ]  # fmt: skip
    for cmd in steps:
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=limit)
        except (OSError, subprocess.TimeoutExpired) as e:
            return None, f"build failed: {e}"
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
            return None, f"build failed ({' '.join(cmd[:2])} ...):\n{tail}"
    return (exe, "") if exe.is_file() else (None, "build produced no nvshmem_p2p")


def run_nvshmem(exe: Path, o: Options, devices: Sequence[int], timeout: float) -> tuple[
        list[Row], str]:  # fmt: skip
    """Runs the program as 2 processes (UID bootstrap through a file); returns rank 0's rows,
    or [] and why not. Kills both processes on timeout."""
    home = nvshmem_home() or ""
    with tempfile.TemporaryDirectory(prefix="gshmem-nvshmem-") as tmp:
        uid = Path(tmp) / "uid"
        env = dict(os.environ)
        for k in [k for k in env if k.startswith("GSHMEM_")]:
            env.pop(k)
        env.update(
            NVSHMEM_DISABLE_NVLS="1",
            NVSHMEM_BOOTSTRAP="UID",
            NVSHMEM_REMOTE_TRANSPORT=env.get("NVSHMEM_REMOTE_TRANSPORT", "none"),
            NVSHMEM_SYMMETRIC_SIZE=env.get("NVSHMEM_SYMMETRIC_SIZE", "3G"),
            NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME=env.get("NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME", "lo"),
            LD_LIBRARY_PATH=os.pathsep.join(
                p for p in (os.path.join(home, "lib"), env.get("LD_LIBRARY_PATH", "")) if p
            ),
            CUDA_VISIBLE_DEVICES=",".join(str(d) for d in devices),
        )
        procs = []
        outs = [Path(tmp) / f"out{r}.txt" for r in range(2)]
        try:
            for r in range(2):
                with open(outs[r], "w") as f:
                    cmd = [str(exe), "--rank", str(r), "--nranks", "2", "--uid-file", str(uid)]
                    procs.append(
                        subprocess.Popen(
                            cmd + nvshmem_args(o),
                            stdout=f,
                            stderr=subprocess.STDOUT,
                            env=env,
                            start_new_session=True,
                        )
                    )
            deadline = time.monotonic() + timeout
            while any(p.poll() is None for p in procs):
                if time.monotonic() > deadline or any(p.poll() not in (None, 0) for p in procs):
                    break
                time.sleep(0.1)
        finally:
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, 9)
                    p.wait()
        text = [f.read_text(errors="replace") for f in outs]
        codes = [p.returncode for p in procs]
    if codes != [0, 0]:
        why = "timed out" if any(c == -9 for c in codes) else f"exit codes {codes}"
        tail = "\n".join((text[0] + text[1]).strip().splitlines()[-12:])
        return [], f"NVSHMEM program failed ({why}):\n{tail}"
    return parse_perf_lines(text[0], impl="nvshmem"), ""


def nvshmem_rows(o: Options, devices: Sequence[int], log: Callable[[str], None],
                 seconds_left: Callable[[], float]) -> list[Row]:  # fmt: skip
    """The NVSHMEM baseline (build, then run on the first two PEs' GPUs), or a row saying why
    it was skipped. Stays within ``seconds_left()`` so the table is printed before the
    launcher's --timeout."""
    build_dir = Path(os.environ.get("GSHMEM_BENCH_BUILD", Path.home() / ".cache" / "gshmem"))
    exe, why = None, f"not enough of --timeout left ({seconds_left():.0f} s)"
    if seconds_left() > 20:
        exe, why = build_nvshmem(build_dir / "nvshmem_p2p", log, limit=seconds_left() - 15)
    if exe is not None:
        left = seconds_left()
        why = f"not enough of --timeout left to run it ({left:.0f} s)"
        if left > 15:
            log(f"running the NVSHMEM comparison program (at most {left:.0f} s) ...")
            rows, why = run_nvshmem(exe, o, devices[:2], timeout=left)
        if rows:
            return rows
        why = why or "the NVSHMEM program printed no results"
    log(f"NVSHMEM comparison skipped: {why}")
    return [Row("nvshmem", "-", "-", "", None, note=f"skipped: {why}")]
