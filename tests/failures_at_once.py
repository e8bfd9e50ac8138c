"""A pytest plugin (conftest.py installs it): with GSHMEM_TEST_FAILURES_AT_ONCE=1, a failing test's
report is written to the terminal the moment it arrives, not in the summary at the end.

Why: scripts/gpu_check.sh runs the GPU suite under a wall-clock limit; when a hung or slow test
makes the step run past it, pytest is killed before its summary, and the log held only an `F`
per failure (2026-11-27, 2 GPUs: two failures, no names). Under pytest-xdist the controller
receives every worker's reports, so this prints there, once per failure (a worker's own output
reaches no log).
"""

from __future__ import annotations

import os

import pytest

ENV = "GSHMEM_TEST_FAILURES_AT_ONCE"


class FailuresAtOnce:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        out = self.config.pluginmanager.get_plugin("terminalreporter")
        if not report.failed or out is None:
            return
        out.write_line("")
        out.write_sep("!", f"FAILED at once: {report.nodeid} ({report.when})")
        for line in report.longreprtext.splitlines():
            out.write_line(line)
        for name, content in report.sections:  # captured output of the failing phase
            if content.strip():
                out.write_sep("-", name)
                out.write_line(content.rstrip())
        out.write_sep("!", f"end of {report.nodeid}")
        out.flush()  # a step killed by its limit kills pytest before its buffer is written


def install(config: pytest.Config) -> None:
    """Called from pytest_configure: registers the reporter when ENV is 1, except in an xdist
    worker."""
    if os.environ.get(ENV) == "1" and not hasattr(config, "workerinput"):
        config.pluginmanager.register(FailuresAtOnce(config), "gshmem-failures-at-once")
