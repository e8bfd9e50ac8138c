"""The at-once failure reporter (tests/failures_at_once.py) that gpu_check.sh turns on: a
failing test's report, with its captured output, appears when the test fails, before any
summary; off by default."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

TESTS = Path(__file__).parents[1]

SUITE = """
import pathlib
import time

def test_first_fails():
    print("what the check printed before it failed")
    assert 6 * 7 == 41, "the answer moved"

def test_then_passes():
    pass

def test_then_hangs():
    pathlib.Path("hanging").touch()
    time.sleep(120)
"""


def _run(tmp_path: Path, at_once: str | None) -> str:
    (tmp_path / "conftest.py").write_text(
        "import failures_at_once\n\n"
        "def pytest_configure(config):\n"
        "    failures_at_once.install(config)\n"
    )
    (tmp_path / "test_suite.py").write_text(SUITE)
    env = dict(os.environ, PYTHONPATH=f"{TESTS}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    env.pop("GSHMEM_TEST_FAILURES_AT_ONCE", None)
    if at_once is not None:
        env["GSHMEM_TEST_FAILURES_AT_ONCE"] = at_once
    # Killed inside the hanging test, as gpu_check.sh's step limit kills pytest: whatever
    # reached the output by then is what a log would hold.
    hanging = tmp_path / "hanging"
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not hanging.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.kill()
    out, _ = proc.communicate()
    assert hanging.exists(), f"the suite never reached its hanging test:\n{out}"
    hanging.unlink()
    return out


def test_a_failure_is_reported_before_the_run_is_killed(tmp_path: Path) -> None:
    out = _run(tmp_path, "1")
    assert "FAILED at once: test_suite.py::test_first_fails (call)" in out, out
    assert "the answer moved" in out, out
    assert "what the check printed before it failed" in out, out
    assert "short test summary" not in out, out  # it never got to the summary
    assert "test_then_passes" not in out, out  # passing tests stay quiet


def test_off_unless_asked(tmp_path: Path) -> None:
    for value in (None, "0"):
        out = _run(tmp_path, value)
        assert "FAILED at once" not in out, out
        assert "the answer moved" not in out, out  # only an F until the summary
