"""Argument and environment validation, and failed inits that must leave nothing behind."""

from __future__ import annotations

import os

import pytest

import gshmem
from gshmem import _C, CudaError, UsageError


def test_sizes_parse_with_units():
    assert _C.parse_size("4096") == 4096
    assert _C.parse_size("64M") == 64 << 20
    assert _C.parse_size("1.5GiB") == 3 << 29
    assert _C.parse_size("2t") == 2 << 40
    for bad in ("", "lots", "12Q", "-1G"):
        with pytest.raises(UsageError, match="not a size"):
            _C.parse_size(bad)


def test_timeout_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("GSHMEM_TIMEOUT", "2.5")
    assert _C.timeout_seconds() == 2.5
    monkeypatch.delenv("GSHMEM_TIMEOUT")
    assert _C.timeout_seconds() == 120.0
    for bad in ("abc", "0", "-3"):
        monkeypatch.setenv("GSHMEM_TIMEOUT", bad)
        with pytest.raises(UsageError, match="GSHMEM_TIMEOUT"):
            _C.timeout_seconds()


def test_unique_id_port_range():
    with pytest.raises(UsageError, match="port"):
        _C.unique_id_create("127.0.0.1", 70000, True)


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(gshmem.device_count() > 0, reason="checks the no-GPU path")
def test_init_without_gpu_fails_clearly_on_every_rank_and_leaves_nothing(monkeypatch):
    monkeypatch.setenv("GSHMEM_TIMEOUT", "10")
    before = open_fds()
    uid = gshmem.unique_id("127.0.0.1")

    def member(rank: int) -> str:
        try:
            gshmem.Comm(uid, rank, 2, 0)
        except CudaError as e:
            return str(e)
        return "no error"

    messages = gshmem.run_concurrently([lambda r=r: member(r) for r in range(2)])
    for msg in messages:
        assert "init failed on rank 0" in msg
        assert "no CUDA device is visible" in msg
    assert open_fds() == before


@pytest.mark.skipif(gshmem.device_count() > 0, reason="checks the no-GPU path")
def test_single_process_init_without_gpu(monkeypatch):
    for var in ("GSHMEM_UNIQUE_ID", "RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(CudaError, match="no CUDA device"):
        gshmem.init()
    with pytest.raises(CudaError, match="no CUDA device"):
        gshmem.init_local()


def test_comm_arguments_are_checked():
    uid = gshmem.unique_id("127.0.0.1")
    with pytest.raises(UsageError, match="outside"):
        gshmem.Comm(uid, 1, 1, 0)
    with pytest.raises(UsageError, match="nranks"):
        gshmem.Comm(uid, 0, 0, 0)
    with pytest.raises(UsageError, match="64 bytes"):
        gshmem.Comm(b"x", 0, 1, 0)
