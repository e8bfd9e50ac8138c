"""GSHMEM_TRANSPORT, GSHMEM_PROXY_QUEUE, GSHMEM_PROXY_STAGING, GSHMEM_PROXY_BULK_MIN and
GSHMEM_PROXY_PART as a comm reads them (docs/network.md), and whether the proxy path's UCX loads
here."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import gshmem
from gshmem import _C


@pytest.mark.parametrize(
    ("text", "expected"),
    [(None, "auto"), ("", "auto"), ("auto", "auto"), ("P2P", "p2p"), ("proxy", "proxy")],
)
def test_transport_from_env(set_env, text, expected):
    set_env("GSHMEM_TRANSPORT", text)
    assert _C.transport() == expected


def test_bad_transport_is_a_usage_error(monkeypatch):
    monkeypatch.setenv("GSHMEM_TRANSPORT", "nvlink")
    with pytest.raises(gshmem.UsageError, match="GSHMEM_TRANSPORT='nvlink' is not a transport"):
        _C.transport()


@pytest.mark.parametrize(("text", "expected"), [(None, 1024), ("2", 2), ("64K", 65536)])
def test_proxy_queue_from_env(set_env, text, expected):
    set_env("GSHMEM_PROXY_QUEUE", text)
    assert _C.proxy_queue_capacity() == expected


@pytest.mark.parametrize("bad", ["1", "1000", "0"])
def test_proxy_queue_must_be_a_power_of_two(monkeypatch, bad):
    monkeypatch.setenv("GSHMEM_PROXY_QUEUE", bad)
    with pytest.raises(gshmem.UsageError, match="must be a power of two"):
        _C.proxy_queue_capacity()


@pytest.mark.parametrize(("text", "expected"), [(None, False), ("1", True), ("off", False)])
def test_proxy_staging_from_env(set_env, text, expected):
    set_env("GSHMEM_PROXY_STAGING", text)
    assert _C.proxy_staging() is expected


def test_bad_proxy_staging_is_a_usage_error(monkeypatch):
    monkeypatch.setenv("GSHMEM_PROXY_STAGING", "sometimes")
    with pytest.raises(gshmem.UsageError, match="'sometimes' is not a boolean"):
        _C.proxy_staging()


@pytest.mark.parametrize(
    ("bulk", "part", "expected"),
    [(None, None, (64 << 10, 4 << 20)), ("1", "1M", (1, 1 << 20)),
     ("256K", None, (256 << 10, 4 << 20))],
)  # fmt: skip
def test_proxy_bulk_sizes_from_env(set_env, bulk, part, expected):
    set_env("GSHMEM_PROXY_BULK_MIN", bulk)
    set_env("GSHMEM_PROXY_PART", part)
    assert _C.proxy_bulk_sizes() == expected


@pytest.mark.parametrize("name", ["GSHMEM_PROXY_BULK_MIN", "GSHMEM_PROXY_PART"])
def test_proxy_bulk_sizes_must_be_positive(monkeypatch, name):
    monkeypatch.setenv(name, "0")
    with pytest.raises(gshmem.UsageError, match=f"{name}=0: needs at least 1 byte"):
        _C.proxy_bulk_sizes()


def test_ucx_unavailable_names_the_library():
    # In a fresh process pointed at a library that does not exist, the reason names it.
    if "built without UCX" in _C.ucx_unavailable():
        pytest.skip("this gshmem was built without UCX: no library is looked for")
    code = "from gshmem import _C; print(_C.ucx_unavailable())"
    env = {**os.environ, "GSHMEM_UCX_LIB": "/nonexistent/libucp.so"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=60, check=True).stdout  # fmt: skip
    assert "/nonexistent/libucp.so" in out, out
