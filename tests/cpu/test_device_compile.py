"""The device API is header-only: a kernel using all of it compiles with plain `nvcc -c` (no -rdc,
no device link step) for sm_80 and sm_90, and so does a C++ host file including the C header."""

from __future__ import annotations

import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INCLUDE = ROOT / "include"
KERNELS = ROOT / "tests" / "gpu" / "kernels" / "device_api_test.cu"
WINDOW_KERNELS = ROOT / "tests" / "gpu" / "kernels" / "window_test.cu"
NVCC = shutil.which("nvcc")

needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")


@needs_nvcc
@pytest.mark.parametrize("kernels", [KERNELS, WINDOW_KERNELS], ids=["device_api", "window"])
def test_device_api_compiles_without_rdc(tmp_path, kernels):
    def compile_for(arch: str) -> tuple[Path, subprocess.CompletedProcess]:
        obj = tmp_path / f"{kernels.stem}_sm{arch}.o"
        gencode = f"-gencode=arch=compute_{arch},code=sm_{arch}"
        cmd = [NVCC, "-c", "-std=c++17", f"-I{INCLUDE}", "-Werror", "all-warnings", gencode,
               str(kernels), "-o", str(obj)]  # fmt: skip
        return obj, subprocess.run(cmd, capture_output=True, text=True, timeout=600)

    with ThreadPoolExecutor(max_workers=2) as pool:  # sm_80 and sm_90 side by side
        for obj, proc in pool.map(compile_for, ["80", "90"]):
            assert proc.returncode == 0, proc.stdout + proc.stderr
            assert obj.stat().st_size > 0


@needs_nvcc
def test_each_device_header_compiles_alone(tmp_path):
    headers = sorted((INCLUDE / "gshmem" / "device").glob("*.cuh"))
    assert headers

    def compile_alone(h: Path) -> tuple[str, subprocess.CompletedProcess]:
        src = tmp_path / f"{h.stem}.cu"
        src.write_text(f"#include <gshmem/device/{h.name}>\n__global__ void k() {{}}\n")
        cmd = [NVCC, "-c", "-std=c++17", f"-I{INCLUDE}", "-arch=sm_90", str(src),
               "-o", str(tmp_path / f"{h.stem}.o")]  # fmt: skip
        return h.name, subprocess.run(cmd, capture_output=True, text=True, timeout=300)

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:  # one nvcc per core
        for name, proc in pool.map(compile_alone, headers):
            assert proc.returncode == 0, f"{name}:\n{proc.stdout}{proc.stderr}"


def test_c_header_is_plain_c(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    src = tmp_path / "c.c"
    src.write_text(
        "#include <gshmem/gshmem.h>\n"
        "int f(const gshmem_team_t* t) { return gshmem_team_translate(t, 0, t); }\n"
    )
    proc = subprocess.run(
        [
            cc,
            "-std=c99",
            "-Wall",
            "-Werror",
            "-pedantic",
            f"-I{INCLUDE}",
            "-c",
            str(src),
            "-o",
            str(tmp_path / "c.o"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_packet_buffer_bytes_matches_the_header():
    """Python's size of a packet buffer is the header's (device_api_test.cu asserts the same
    values of gshmem::packet_buffer_bytes at compile time): 16 bytes per 8 data bytes, rounded
    up; a negative size is an error."""
    from gshmem.device import packet_buffer_bytes

    sizes = {0: 0, 1: 16, 7: 16, 8: 16, 9: 32, 4099: 8208, 1 << 20: 2 << 20}
    assert {n: packet_buffer_bytes(n) for n in sizes} == sizes
    with pytest.raises(ValueError, match="nbytes must be >= 0"):
        packet_buffer_bytes(-1)
