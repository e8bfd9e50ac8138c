"""Runs every rank of a net_worker.py scenario as its own process and collects their results
(test_net_engine.py, and the GPU one in tests/gpu/test_net_gpu.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

WORKER = str(Path(__file__).with_name("net_worker.py"))


def run_ranks(
    scenario: str,
    nranks: int,
    *,
    address: str = "127.0.0.1",
    timeout: float = 20.0,
    prefix: list[list[str]] | None = None,
    env: dict | None = None,
    kill_after: int | None = None,
) -> list[dict]:
    """Runs every rank of `scenario` (rank r under prefix[r], e.g. `ip netns exec ns`); rank
    `kill_after`, which would not end by itself, is killed once the others have ended."""
    # The id picks a free port on rank 0's host, so it is made where rank 0 runs.
    make = f"from gshmem import _C; print(_C.unique_id_create({address!r}, 0, False).hex())"
    uid = subprocess.run([*(prefix[0] if prefix else []), sys.executable, "-c", make],
                         check=True, capture_output=True, text=True).stdout.strip()  # fmt: skip
    full_env = {**os.environ, **(env or {})}
    procs = []
    for r in range(nranks):
        rank_args = [WORKER, uid, str(r), str(nranks), str(timeout), scenario]
        cmd = [*(prefix[r] if prefix else []), sys.executable, *rank_args]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, env=full_env))  # fmt: skip
    results = []
    ordered = [r for r in range(nranks) if r != kill_after] + ([kill_after] if kill_after else [])
    outputs = {}
    for r in ordered:
        if r == kill_after:
            procs[r].kill()
        outputs[r] = procs[r].communicate(timeout=timeout + 60)
    for r, p in enumerate(procs):
        out, err = outputs[r]
        lines = [line for line in out.splitlines() if line.startswith("{")]
        results.append(json.loads(lines[-1]) if lines else {"ok": False, "rc": p.returncode,
                                                           "stderr": err[-2000:]})  # fmt: skip
    return results
