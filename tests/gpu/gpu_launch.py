"""Runs a GPU test script on N PEs through the project's launcher, with timeouts everywhere."""

from __future__ import annotations

import os
import subprocess
import sys


def launch_pes(n: int, script: str, scenario: str, timeout: int = 240, **env: str) -> str:
    """Runs ``script scenario`` as N ranks of ``python -m gshmem.run``; asserts that it exited 0
    and that every rank printed ``PASS <scenario>``; returns the combined output."""
    cmd = [sys.executable, "-m", "gshmem.run", "-n", str(n), "--timeout", str(timeout - 20)]
    proc = subprocess.run(
        [*cmd, script, scenario],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "GSHMEM_TIMEOUT": "120", "GSHMEM_CHECK_ALLOC": "1", **env},
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert out.count(f"PASS {scenario}") == n, out
    return out
