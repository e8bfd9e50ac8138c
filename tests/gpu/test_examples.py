"""The examples in examples/ run on GPUs (2 PEs): CUDA C++ built by plain CMake, CuPy/NVRTC,
Triton through the peer table, and a Hugging Face Llama switched to context-parallel attention."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run2(*program: str, timeout: int = 300) -> str:
    cmd = [sys.executable, "-m", "gshmem.run", "-n", "2", "--timeout", str(timeout - 30), *program]
    env = {**os.environ, "GSHMEM_TIMEOUT": "120"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    return out


@pytest.mark.gpus(2)
def test_cuda_cpp_example_built_with_plain_cmake(tmp_path):
    if shutil.which("cmake") is None or shutil.which("nvcc") is None:
        pytest.skip("needs cmake and nvcc")
    build = tmp_path / "build"
    for cmd in (
        [
            "cmake",
            "-S",
            str(EXAMPLES / "cuda_ring"),
            "-B",
            str(build),
            "-DCMAKE_CUDA_ARCHITECTURES=native",
            f"-DPython_EXECUTABLE={sys.executable}",
        ],
        ["cmake", "--build", str(build)],
    ):
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    out = run2(str(EXAMPLES / "cuda_ring" / "run.py"), str(build / "libring.so"))
    assert out.count("PASS ring") == 2, out


@pytest.mark.gpus(2)
def test_cupy_rawkernel_example():
    pytest.importorskip("cupy")
    assert run2(str(EXAMPLES / "cupy_rawkernel.py")).count("PASS cupy") == 2


@pytest.mark.gpus(2)
def test_triton_example():
    pytest.importorskip("triton")
    assert run2(str(EXAMPLES / "triton_put_signal.py")).count("PASS triton") == 2


@pytest.mark.gpus(2)
def test_hf_llama_context_parallel_example():
    pytest.importorskip("transformers")
    out = run2(str(EXAMPLES / "cp_llama_hf.py"))
    assert "PASS" in out and "FAIL" not in out, out
