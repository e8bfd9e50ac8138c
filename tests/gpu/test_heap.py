"""Symmetric heap on GPUs: multi-process (via gshmem.run) and one-process-per-node layouts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from gpu_launch import launch_pes
from pe_counts import pe_params

SCRIPT = str(Path(__file__).parent / "scripts" / "heap_check.py")


def launch(n: int, scenario: str, **env: str) -> str:
    return launch_pes(n, SCRIPT, scenario, **env)


PES = pe_params(2, 4)


@pytest.mark.parametrize("n", PES)
@pytest.mark.parametrize(
    "scenario", ["data", "growth", "mismatch", "reinit", "badinit", "contexts"]
)
def test_heap(n, scenario):
    launch(n, scenario, GSHMEM_HEAP_INITIAL="64M", GSHMEM_HEAP_GROW="64M")


@pytest.mark.gpus(2)
def test_heap_without_p2p_has_no_peer_views(tmp_path):
    # With P2P off every peer is unreachable: ptr()/peer_tensor() give None, own data works.
    code = (
        "import gshmem, torch\n"
        "c = gshmem.init(); t = c.empty((10,))\n"
        "assert c.peer_tensor(t, 1 - c.rank) is None\n"
        "assert c.ptr(t.data_ptr(), c.rank) == t.data_ptr()\n"
        "c.finalize(); print('PASS nop2p')\n"
    )
    script = tmp_path / "nop2p.py"
    script.write_text(code)
    proc = subprocess.run(
        [sys.executable, "-m", "gshmem.run", "-n", "2", "--timeout", "100", str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "GSHMEM_DISABLE_P2P": "1", "GSHMEM_TRANSPORT": "p2p"},
    )
    assert proc.returncode == 0 and proc.stdout.count("PASS nop2p") == 2, proc.stdout + proc.stderr


@pytest.mark.gpus(2)
def test_one_comm_per_gpu_in_one_process():
    proc = subprocess.run(
        [sys.executable, SCRIPT, "local"], capture_output=True, text=True, timeout=240
    )
    assert proc.returncode == 0 and "PASS local" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.gpus(2)
def test_timing_is_reported():
    out = launch(min(4, _gpus()), "timing")
    assert "TIMING" in out


def _gpus() -> int:
    import gshmem

    return gshmem.device_count()
