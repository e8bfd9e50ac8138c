"""Long-context training on GPUs through ``python -m gshmem.bench train``: a 2-layer model of the
Llama-3-8B width trains 20 steps with CP over 2 GPUs on each transport, and the loss falls; the
two transports give the same losses; and the CP run gives the losses of the same job on one GPU
(CP = 1, the whole sequence on one device), within bf16 noise. PyTorch (FSDP2, one process per
GPU) and JAX (one process driving the GPUs). And on real text (Python's language reference as
bytes) the loss falls too."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

SEQ, LAYERS, STEPS = "8K", 2, 20

# Whole training jobs (~40 s each): in a parallel run (scripts/gpu_check.sh) one worker takes a
# framework's in turn, and first, so that the run does not end on them.
pytestmark = pytest.mark.long
torch_jobs, jax_jobs = pytest.mark.xdist_group("train-torch"), pytest.mark.xdist_group("train-jax")


def train_losses(tmp_path, framework: str, backend: str, gpus: int,
                 data: str = "synthetic") -> list[float]:  # fmt: skip
    out = tmp_path / f"{framework}-{backend}-{gpus}-{data}.json"
    cmd = [sys.executable, "-m", "gshmem.bench", "train", "--framework", framework,
           "--backend", backend, "--np", str(gpus), "--seq", SEQ, "--layers", str(LAYERS),
           "--steps", str(STEPS), "--data", data, "--timeout", "500",
           "--json", str(out)]  # fmt: skip
    env = {**os.environ, "GSHMEM_TIMEOUT": "120"}
    if framework == "jax":  # one process sees exactly the GPUs it drives: the first of ours
        ours = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
        env["CUDA_VISIBLE_DEVICES"] = ",".join(ours[:gpus] or [str(i) for i in range(gpus)])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=560, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    row = json.loads(out.read_text())
    assert row["gpus"] == gpus and len(row["losses"]) == STEPS
    return row["losses"]


def falls(losses: list[float]) -> bool:
    return bool(np.isfinite(losses).all()) and np.mean(losses[-3:]) < np.mean(losses[:3])


def check_parity(tmp_path, framework: str) -> None:
    runs = {(b, 2): train_losses(tmp_path, framework, b, 2) for b in ("gshmem", "nccl")}
    one = train_losses(tmp_path, framework, "gshmem", 1)
    for losses in runs.values():
        assert falls(losses), losses
    # the same schedule and kernels on either transport: equal up to bf16 noise
    np.testing.assert_allclose(runs["gshmem", 2], runs["nccl", 2], rtol=1e-3)
    # CP = 2 against the whole sequence on one GPU: other block shapes, other rounding
    np.testing.assert_allclose(runs["gshmem", 2], one, rtol=5e-3)


@torch_jobs
@pytest.mark.gpus(2)
def test_torch_training_parity(tmp_path):
    check_parity(tmp_path, "torch")


@torch_jobs
@pytest.mark.gpus(2)
def test_torch_training_on_text(tmp_path):
    losses = train_losses(tmp_path, "torch", "gshmem", 2, data="text")
    assert falls(losses), losses


@jax_jobs
@pytest.mark.gpus(2)
def test_jax_training_parity(tmp_path):
    if importlib.util.find_spec("jax") is None:
        pytest.skip("jax is not installed")
    check_parity(tmp_path, "jax")
