"""Runs a GPU test script on N PEs through the project's launcher, with timeouts everywhere."""

from __future__ import annotations

import os
import subprocess
import sys


def launch_pes(n: int, script: str, scenario: str | list[str], timeout: int = 240,
               **env: str) -> str:  # fmt: skip
    """Runs ``script scenario`` as N ranks of ``python -m gshmem.run``; asserts that it exited 0
    and that every rank printed ``PASS <scenario>``; returns the combined output. A list runs
    its scenarios in one launch, in turn (scripts that take several: run_scenarios), each of
    which must pass on every rank."""
    scenarios = [scenario] if isinstance(scenario, str) else scenario
    cmd = [sys.executable, "-m", "gshmem.run", "-n", str(n), "--timeout", str(timeout - 20)]
    proc = subprocess.run(
        [*cmd, script, *scenarios],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "GSHMEM_TIMEOUT": "120", "GSHMEM_CHECK_ALLOC": "1", **env},
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    for name in scenarios:
        assert out.count(f"PASS {name}") == n, (name, out)
    return out
