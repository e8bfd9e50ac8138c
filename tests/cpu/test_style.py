"""The Python sources are ruff-clean (lint and format, pyproject.toml's settings); the C, C++
and CUDA sources keep to .clang-format's column limit."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ["python", "tests", "benchmarks", "examples"]


@pytest.mark.skipif(importlib.util.find_spec("ruff") is None, reason="ruff is not installed")
@pytest.mark.parametrize("args", [["check"], ["format", "--check"]], ids=["lint", "format"])
def test_ruff(args):
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", *args, *SOURCES],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


CXX_SUFFIXES = {".c", ".h", ".cpp", ".hpp", ".cu", ".cuh"}


def test_cxx_lines_fit_the_column_limit():
    """Every line of the C, C++ and CUDA sources git tracks fits .clang-format's ColumnLimit
    (clang-format applies it to what it reformats; this holds the files it has not touched)."""
    limit = int(re.search(r"^ColumnLimit:\s*(\d+)", (ROOT / ".clang-format").read_text(), re.M)[1])
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if tracked.returncode != 0:
        pytest.skip("not a git checkout")
    long = []
    for name in tracked.stdout.split():
        path = ROOT / name
        if path.suffix in CXX_SUFFIXES and path.is_file():
            for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if len(line) > limit:
                    long.append(f"{name}:{n} ({len(line)} columns)")
    assert not long, f"lines over {limit} columns: " + ", ".join(long[:20])
