"""Compiles the test kernels into CuPy's kernel cache (CUPY_CACHE_DIR, else CuPy's default) before
the GPU tests start, so that their processes load the modules instead of each compiling them
with NVRTC (~30 s a file). scripts/gpu_check.sh runs it in the background as the tests start
(the suites that need the kernels come later in the run); it writes the cache entries the
checks themselves would write (same source, options and header digest:
device_api_check.raw_module).

Usage: warm_kernels.py    (one GPU, the first visible; prints the time each file took)
"""

from __future__ import annotations

import time
from pathlib import Path

import cupy as cp
from device_api_check import raw_module

KERNELS = Path(__file__).resolve().parents[1] / "kernels"
FILES = ("device_api_test.cu", "window_test.cu")  # the ones the checks build through raw_module


def main() -> None:
    cp.cuda.Device(0).use()
    for name in FILES:
        start = time.perf_counter()
        raw_module(KERNELS / name).compile()
        print(f"warm_kernels: {name} in {time.perf_counter() - start:.1f} s", flush=True)


if __name__ == "__main__":
    main()
