"""scripts/gpu_check.sh runs the GPU suite in parallel: tests marked gpu_alone (they measure the
GPU) run on GPUs of their own, pinned by tests/gpu_placement.py; the others share the GPUs, each
worker seeing them rotated so that concurrent tests spread over all of them."""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import ports
import pytest
from gpu_placement import pinned_devices, rotated_devices
from pe_counts import runs_at

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("worker", "visible", "count", "want"),
    [
        ("gw0", None, 2, "0"),
        ("gw1", None, 2, "1"),
        ("gw2", None, 2, "0"),  # more workers than GPUs: they take turns
        ("gw5", "", 4, "1"),
        ("gw1", "4,5,6", 3, "5"),  # indices into the job's own CUDA_VISIBLE_DEVICES
        ("gw3", "4, 5,6", 3, "4"),
        ("gw1", "GPU-aa,GPU-bb", 2, "GPU-bb"),  # UUIDs pass through
        ("gw1", "2,3,7", 2, "3"),  # CUDA stops at an entry it cannot use: the first `count`
        ("gw7", "6", 0, "6"),  # no count known (no driver here): the listed ones
    ],
)
def test_each_worker_gets_one_gpu(worker, visible, count, want):
    assert pinned_devices(worker, visible, count) == want


@pytest.mark.parametrize(
    ("worker", "count", "per_worker", "want"),
    [
        ("gw0", 4, 2, "0,1"),
        ("gw1", 4, 2, "2,3"),
        ("gw2", 4, 2, "0,1"),  # more workers than pairs: they take turns
        ("gw1", 5, 2, "2,3"),  # the odd GPU out is never half a pair
        ("gw0", 2, 2, "0,1"),
    ],
)
def test_workers_get_disjoint_groups(worker, count, per_worker, want):
    assert pinned_devices(worker, None, count, per_worker) == want


@pytest.mark.parametrize(
    ("worker", "visible", "count", "per_worker", "why"),
    [
        ("master", None, 2, 1, "not a pytest-xdist worker"),
        ("gw1", None, 0, 1, "no GPU"),
        ("gw0", None, 1, 2, "2 GPUs per worker, the job sees 1"),
        ("gw0", "3", 0, 2, "2 GPUs per worker, the job sees 1"),
    ],
)
def test_no_pin_without_a_worker_or_enough_gpus(worker, visible, count, per_worker, why):
    with pytest.raises(ValueError, match=why):
        pinned_devices(worker, visible, count, per_worker)
    if per_worker == 1:  # the shared phase refuses alike
        with pytest.raises(ValueError, match=why):
            rotated_devices(worker, visible, count)


@pytest.mark.parametrize(
    ("worker", "visible", "count", "want"),
    [
        ("gw0", None, 4, "0,1,2,3"),
        ("gw1", None, 4, "1,2,3,0"),
        ("gw6", None, 4, "2,3,0,1"),
        ("gw1", "5,7", 2, "7,5"),
        ("gw3", None, 1, "0"),
    ],
)
def test_shared_phase_rotates_every_gpu(worker, visible, count, want):
    assert rotated_devices(worker, visible, count) == want


def test_rotations_spread_two_pe_jobs_over_every_gpu():
    """Concurrent 2-PE jobs (PE i on the i-th visible GPU) load each of 4 GPUs equally."""
    load = [0] * 4
    for k in range(8):
        for gpu in rotated_devices(f"gw{k}", None, 4).split(",")[:2]:
            load[int(gpu)] += 1
    assert load == [4, 4, 4, 4]


PROXY_FILES = ("tests/gpu/test_proxy_path.py", "tests/gpu/test_net_gpu.py")


@functools.cache
def _gpu_suite() -> tuple[list[str], list[tuple[str, set[str]]]]:
    """One collection of the GPU suite: its test ids in the order collection produced them, and
    in the final order, each with its markers' names (printed by _collect_markers.py)."""
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "--collect-only", "-p", "_collect_markers",
         "-p", "no:cacheprovider", "tests/gpu"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests" / "cpu"),
                                                          os.environ.get("PYTHONPATH", "")])},
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    rows = [line.split("\t") for line in out.stdout.splitlines()]
    before = [r[1] for r in rows if r[0] == "BEFORE"]
    final = [(r[1], set(filter(None, r[2].split(",")))) for r in rows if r[0] == "ITEM"]
    assert final and sorted(before) == sorted(i for i, _ in final), out.stdout
    return before, final


def test_the_phases_split_the_gpu_suite():
    """Every fault case is in the one-per-GPU phase (marked gpu_alone), and nothing else is."""
    _, final = _gpu_suite()
    alone = {i for i, marks in final if "gpu_alone" in marks}
    assert {t.split("::")[0] for t in alone} == {"tests/gpu/test_faults.py"}
    # 10 scenarios (test_faults.SCENARIOS) x kill/silent, each listed by the collection
    assert sum("test_fault_is_raised_not_hung" in t for t in alone) == 20
    assert not any("test_faults.py" in i for i, marks in final if "gpu_alone" not in marks)


def test_long_tests_are_collected_first():
    """Tests marked long lead the collection (xdist then hands them out first); both they and
    the rest keep the order collection gave them."""
    before, final = _gpu_suite()
    long = [i for i, marks in final if "long" in marks]
    assert [i for i, _ in final] == [i for i in before if i in long] + [
        i for i in before if i not in long
    ]
    training = [f"tests/gpu/test_train_parity.py::test_{name}"
                for name in ("torch_training_parity", "torch_training_on_text",
                             "jax_training_parity")]  # fmt: skip
    attention = [f"tests/gpu/test_jax.py::test_one_process_every_gpu[attention_{algorithm}]"
                 for algorithm in ("ring", "allgather")]  # fmt: skip
    attention += [f"tests/gpu/test_jax.py::test_one_process_per_gpu[attention_{algorithm}-{n}pe]"
                  for algorithm in ("ring", "allgather") for n in (2, 4)]  # fmt: skip
    have_jax = importlib.util.find_spec("jax") is not None
    proxy = [i for i, _ in final if i.split("::")[0] in PROXY_FILES]
    assert proxy  # the proxy group runs in turn on one worker: it starts first
    assert sorted(long) == sorted(training + attention * have_jax + proxy)


@pytest.mark.parametrize(
    ("n", "counts", "gpus", "widest_only", "runs"),
    [
        (2, (2, 4), 4, False, True),  # every count by default
        (2, (2, 4), 4, True, False),  # the 2-GPU check runs it
        (4, (2, 4), 4, True, True),
        (2, (2, 4), 2, True, True),  # the widest that fits
        (4, (2, 4), 8, True, True),
        (1, (1, 2, 4), 4, True, True),  # single-PE paths are code of their own
        (2, (1, 2, 4), 4, True, False),
        (2, (2, 4), 1, True, True),  # nothing fits: left to the gpus(n) skip
    ],
)
def test_widest_pe_count_that_fits(n, counts, gpus, widest_only, runs):
    assert runs_at(n, counts, gpus, widest_only) is runs


def test_every_multi_pe_case_carries_its_counts():
    """Each case id'd <n>pe is marked pes(n, ...), so GSHMEM_TEST_WIDEST_PES reaches it."""
    _, final = _gpu_suite()
    cases = [(i, marks) for i, marks in final if re.search(r"[\[-]\dpe[\]-]", i)]
    assert len(cases) > 50
    assert all("pes" in marks for _, marks in cases), [i for i, m in cases if "pes" not in m]


# 49 blocks of 256 ports from 20000 fit below 32768: worker n takes block n mod 49.
@pytest.mark.parametrize(
    ("worker", "first"), [("gw0", 20000), ("gw3", 20768), ("gw48", 32288), ("gw100", 20512)]
)
def test_private_ports_are_the_workers_own_below_the_ephemeral_range(monkeypatch, worker, first):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
    port = ports.private_port()
    assert first <= port < first + 256 <= 32768
    with socket.socket() as s:  # free: the job can bind it
        s.bind(("", port))
