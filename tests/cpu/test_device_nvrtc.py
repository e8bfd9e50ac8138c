"""The device API compiles under NVRTC (the path CuPy RawModule and other JITs take), checked on
the CPU: NVRTC needs no GPU. Uses libnvrtc from the CUDA toolkit or the nvidia-cuda-nvrtc wheel."""

from __future__ import annotations

import ctypes
import glob
import os
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import gshmem

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ROOT / "tests" / "gpu" / "kernels" / "device_api_test.cu"
PROXY_KERNELS = ROOT / "tests" / "gpu" / "kernels" / "proxy_test.cu"
WINDOW_KERNELS = ROOT / "tests" / "gpu" / "kernels" / "window_test.cu"


def find_nvrtc() -> str | None:
    patterns = [os.path.join(p, "nvidia", "cu13", "lib", "libnvrtc.so*") for p in sys.path if p] + [
        "/usr/local/cuda/lib64/libnvrtc.so*",
        "/usr/local/cuda/targets/*/lib/libnvrtc.so*",
    ]
    for pattern in patterns:
        hits = sorted(glob.glob(pattern))
        if hits:
            return hits[0]
    return None


def find_cuda_include() -> str | None:
    """The CUDA toolkit's include directory: the 16-bit float reductions (device/reduce.cuh)
    include cuda_fp16.h and cuda_bf16.h, which NVRTC does not ship."""
    nvcc = shutil.which("nvcc")
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    roots += [os.path.dirname(os.path.dirname(nvcc))] if nvcc else []
    dirs = [os.path.join(r, "include") for r in roots if r]
    dirs += [os.path.join(p, "nvidia", "cu13", "include") for p in sys.path if p]
    return next((d for d in dirs if os.path.isfile(os.path.join(d, "cuda_bf16.h"))), None)


LIB = find_nvrtc()
CUDA_INCLUDE = find_cuda_include()
needs_nvrtc = pytest.mark.skipif(
    LIB is None, reason="libnvrtc not found (pip install nvidia-cuda-nvrtc)"
)


def nvrtc_compile(source: str, name: str, options: list[str]) -> tuple[int, str]:
    # libnvrtc dlopens its builtins by soname: load them from the same folder first.
    for builtins in glob.glob(os.path.join(os.path.dirname(LIB), "libnvrtc-builtins.so*")):
        ctypes.CDLL(builtins, mode=ctypes.RTLD_GLOBAL)
    lib = ctypes.CDLL(LIB)
    prog = ctypes.c_void_p()
    rc = lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None)
    assert rc == 0, f"nvrtcCreateProgram failed: {rc}"
    opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
    rc = lib.nvrtcCompileProgram(prog, len(options), opts)
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return rc, log.value.decode(errors="replace")


@needs_nvrtc
@pytest.mark.skipif(CUDA_INCLUDE is None, reason="no CUDA include directory with cuda_bf16.h")
def test_device_api_compiles_with_nvrtc():
    # Every entry point, the collectives for every element type and operator included, for
    # compute_80 and compute_90 side by side (ctypes lets go of the GIL while NVRTC compiles).
    def compile_for(arch: str) -> tuple[int, str]:
        options = [f"-I{gshmem.include_dir()}", f"-I{CUDA_INCLUDE}", "-std=c++17",
                   f"--gpu-architecture={arch}"]  # fmt: skip
        return nvrtc_compile(KERNELS.read_text(), "device_api_test.cu", options)

    with ThreadPoolExecutor(max_workers=2) as pool:
        for rc, log in pool.map(compile_for, ["compute_80", "compute_90"]):
            assert rc == 0, log


@needs_nvrtc
def test_proxy_queue_producer_compiles_with_nvrtc():
    # GPU threads as proxy producers (gshmem/device/proxy.cuh), as the GPU test compiles them.
    options = [f"-I{gshmem.include_dir()}", "-std=c++17", "--gpu-architecture=compute_80"]
    rc, log = nvrtc_compile(PROXY_KERNELS.read_text(), "proxy_test.cu", options)
    assert rc == 0, log


@needs_nvrtc
@pytest.mark.parametrize("arch", ["compute_80", "compute_90"])
def test_window_kernels_compile_with_nvrtc(arch):
    # WindowContext's whole surface, as the GPU test (scripts/window_check.py) compiles it.
    options = [f"-I{gshmem.include_dir()}", "-std=c++17", f"--gpu-architecture={arch}"]
    rc, log = nvrtc_compile(WINDOW_KERNELS.read_text(), "window_test.cu", options)
    assert rc == 0, log


@needs_nvrtc
def test_device_api_needs_only_its_own_include_dir():
    # Without the CUDA headers, everything but the 16-bit float reductions still compiles.
    source = (
        "#include <gshmem/device.cuh>\n"
        "__global__ void k(gshmem::Device d, gshmem::Team t, float* f, int64_t* i, char* b) {\n"
        "  bool ok = gshmem::all_reduce<gshmem::Block, gshmem::ReduceOp::Sum>(d, t, f, f, 9);\n"
        "  ok &= gshmem::reduce_scatter<gshmem::Warp, gshmem::ReduceOp::Max>(d, t, i, i + 9, 9);\n"
        "  ok &= gshmem::broadcast<gshmem::Block>(d, t, b, b + 64, 64, 0);\n"
        "  if (!ok) f[0] = -1;  // the collectives are bounded: false once a wait gave up\n"
        "}\n"
    )
    options = [f"-I{gshmem.include_dir()}", "-std=c++17", "--gpu-architecture=compute_80"]
    rc, log = nvrtc_compile(source, "bare.cu", options)
    assert rc == 0, log


@needs_nvrtc
def test_block_scope_rma_stays_launchable_with_1024_threads():
    # A kernel with no launch bounds that moves data with block-scope put/get must fit 1024
    # threads (64K registers per SM on sm_90: at most 64 per thread). The proxy routing once made
    # such a kernel 72 registers, and every 1024-thread launch of it failed; the route is now
    # decided before the copy so that nothing of the proxy path is live across it.
    source = (
        "#include <gshmem/device.cuh>\n"
        'extern "C" __global__ void bw(gshmem::Device d, char* dst, const char* src,\n'
        "                              unsigned long long n, int iters, int pe, int get) {\n"
        "  for (int i = 0; i < iters; ++i) {\n"
        "    if (get) gshmem::get<gshmem::Block>(d, dst, src, n, pe);\n"
        "    else gshmem::put<gshmem::Block>(d, dst, src, n, pe);\n"
        "  }\n"
        "  gshmem::quiet<gshmem::Block>();\n"
        "}\n"
    )
    options = [f"-I{gshmem.include_dir()}", "-std=c++17", "--gpu-architecture=sm_90",
               "--ptxas-options=-v"]  # fmt: skip
    rc, log = nvrtc_compile(source, "launchable.cu", options)
    assert rc == 0, log
    used = [int(line.split("Used ")[1].split()[0]) for line in log.splitlines() if "Used " in line]
    assert used and used[0] <= 64, log


@needs_nvrtc
def test_nvrtc_reports_errors():
    # The check above can fail: a broken kernel must come back as a compile error.
    source = "#include <gshmem/device.cuh>\n__global__ void k(gshmem::Device d) { d.nope(); }\n"
    rc, log = nvrtc_compile(source, "broken.cu", [f"-I{gshmem.include_dir()}", "-std=c++17"])
    assert rc != 0 and "nope" in log
