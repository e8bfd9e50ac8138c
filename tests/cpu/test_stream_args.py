"""Argument handling of the on-stream operations that needs no GPU: comparison and signal-op
names, stream handles, value ranges, tensor/Buffer checks, and the kernel-threshold setting."""

from __future__ import annotations

import sys
import types

import pytest

import gshmem
from gshmem import _C
from gshmem._scalars import u64
from gshmem._stream_args import (
    cmp_code,
    common_rows,
    copy_rows,
    same_size,
    signal_op_code,
    span,
    stream_handle,
)


@pytest.mark.parametrize(
    ("name", "code"), [("eq", 0), ("ne", 1), ("gt", 2), ("ge", 3), ("lt", 4), ("le", 5)]
)
def test_cmp_names_match_the_c_abi(name, code):
    assert cmp_code(name) == code
    assert cmp_code(name.upper()) == code


@pytest.mark.parametrize("bad", ["gte", "", "==", 3, None])
def test_bad_cmp_is_a_usage_error(bad):
    with pytest.raises(gshmem.UsageError, match="cmp must be one of 'eq', 'ne'"):
        cmp_code(bad)


def test_signal_ops():
    assert signal_op_code("set") == _C.SIGNAL_SET == 0
    assert signal_op_code("ADD") == _C.SIGNAL_ADD == 1
    for bad in ("xor", "", 1, None):
        with pytest.raises(gshmem.UsageError, match="op must be 'set' or 'add'"):
            signal_op_code(bad)


def test_values_are_unsigned_64_bit():
    assert u64(0, "value") == 0
    assert u64((1 << 64) - 1, "value") == (1 << 64) - 1
    for bad in (-1, 1 << 64):
        with pytest.raises(gshmem.UsageError, match="unsigned 64-bit"):
            u64(bad, "value")
    for bad in (1.0, True, "1"):
        with pytest.raises(gshmem.UsageError, match="must be an int"):
            u64(bad, "value")


class FakeStream:
    """What stream_handle reads from a torch.cuda.Stream: cuda_stream and device.index."""

    def __init__(self, handle: object, index: int | None) -> None:
        self.cuda_stream = handle
        self.device = types.SimpleNamespace(index=index)


def test_stream_handles():
    assert stream_handle(0, 0) == 0
    assert stream_handle(0x1234, 3) == 0x1234
    assert stream_handle(FakeStream(0x5678, 2), 2) == 0x5678
    with pytest.raises(gshmem.UsageError, match="belongs to cuda:1 but this comm's GPU is cuda:2"):
        stream_handle(FakeStream(0x5678, 1), 2)
    with pytest.raises(gshmem.UsageError, match="must not be negative"):
        stream_handle(-5, 0)
    for bad in (True, "default", 1.5, FakeStream("x", 0), object()):
        with pytest.raises(gshmem.UsageError, match="stream must be a torch.cuda.Stream"):
            stream_handle(bad, 0)


def test_default_stream_without_torch_is_the_legacy_stream(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert stream_handle(None, 0) == 0


def test_default_stream_is_torchs_current_stream(monkeypatch):
    seen = []

    def current_stream(device):
        seen.append(device)
        return types.SimpleNamespace(cuda_stream=0xBEEF)

    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(current_stream=current_stream))
    monkeypatch.setitem(sys.modules, "torch", fake)
    assert stream_handle(None, 3) == 0xBEEF
    assert seen == [3]


def test_span_of_buffers_and_tensors():
    comm = types.SimpleNamespace(device=1)
    buf = gshmem.Buffer(comm, 0x1000, 64, 0)
    assert span(buf, "dst", 1) == (0x1000, 64)
    with pytest.raises(gshmem.UsageError, match="Buffer on cuda:1, not on cuda:0"):
        span(buf, "dst", 0)
    with pytest.raises(gshmem.UsageError, match="torch.Tensor or a gshmem.Buffer"):
        span(b"bytes", "dst", 0)
    torch = pytest.importorskip("torch")
    with pytest.raises(gshmem.UsageError, match="put: src is on cpu; it must be on cuda:0"):
        span(torch.zeros(4), "put: src", 0)


def test_buffer_views_are_sub_ranges_of_one_pe():
    comm = types.SimpleNamespace(device=1)
    buf = gshmem.Buffer(comm, 0x1000, 64, 3)
    sub = buf.view(16, 8)
    assert (sub.ptr, sub.nbytes, sub.pe, sub.device) == (0x1010, 8, 3, 1)
    assert span(buf.view(64, 0), "dst", 1) == (0x1040, 0)
    for offset, nbytes in ((60, 8), (-1, 4), (0, -1), (65, 0)):
        with pytest.raises(gshmem.UsageError, match="outside the buffer's 64 bytes"):
            buf.view(offset, nbytes)
    with pytest.raises(gshmem.UsageError, match="must be an int"):
        buf.view(1.0, 4)


def test_sizes_must_match():
    same_size("put", 8, 8)
    with pytest.raises(gshmem.UsageError, match="dst has 8 bytes but src has 9"):
        same_size("put", 8, 9)


def test_comm_methods_check_before_calling_the_runtime():
    # A Comm shell with no native handle: each call must fail in Python, before reaching it.
    comm = gshmem.Comm.__new__(gshmem.Comm)
    comm.device = 0
    comm._handle = None
    a = gshmem.Buffer(comm, 0x1000, 8, 0)
    b = gshmem.Buffer(comm, 0x2000, 16, 0)
    with pytest.raises(gshmem.UsageError, match="must match"):
        comm.put(a, b, 1, stream=0)
    with pytest.raises(gshmem.UsageError, match="must match"):
        comm.get(b, a, 1, stream=0)
    with pytest.raises(gshmem.UsageError, match="8 bytes"):
        comm.signal_op(b, 1, 1, stream=0)
    with pytest.raises(gshmem.UsageError, match="op must be"):
        comm.put_signal(a, a, a, 1, 1, op="inc", stream=0)
    with pytest.raises(gshmem.UsageError, match="cmp must be"):
        comm.signal_wait_until(a, "above", 1, stream=0)
    with pytest.raises(gshmem.UsageError, match="stream must be"):
        comm.quiet(stream="now")
    with pytest.raises(gshmem.UsageError, match="stream must be"):
        comm.barrier_on_stream(stream=[])


@pytest.mark.parametrize(
    ("text", "expected"),
    [(None, 16384), ("", 16384), ("0", 0), ("4096", 4096), ("64K", 65536), ("1MiB", 1 << 20)],
)
def test_kernel_threshold_from_env(set_env, text, expected):
    set_env("GSHMEM_STREAM_KERNEL_MAX_BYTES", text)
    assert _C.stream_kernel_max_bytes() == expected


@pytest.mark.parametrize("bad", ["lots", "-1", "12Q"])
def test_bad_kernel_threshold_is_a_usage_error(monkeypatch, bad):
    monkeypatch.setenv("GSHMEM_STREAM_KERNEL_MAX_BYTES", bad)
    with pytest.raises(
        gshmem.UsageError, match="GSHMEM_STREAM_KERNEL_MAX_BYTES='.*' is not a size"
    ):
        _C.stream_kernel_max_bytes()


def test_copy_rows_moves_each_element_to_its_place():
    """put_2d's geometry: slices of heads or of tokens of [batch, heads, seq, dim] tensors (and
    of their sequence-major transposes) are one 2-D copy; simulating that copy on the bytes of
    the whole destination buffer puts every element where ``dst.copy_(src)`` would and writes
    nothing else."""
    import torch

    def storage_bytes(t):  # a copy of the bytes of t's whole buffer
        return torch.frombuffer(bytearray(t.untyped_storage()), dtype=torch.uint8)

    def simulate(dst, src):
        d_pitch, s_pitch, width, height = copy_rows(dst, src, "put_2d")
        d_bytes, s_bytes = storage_bytes(dst), storage_bytes(src)
        d0 = dst.storage_offset() * dst.element_size()
        s0 = src.storage_offset() * src.element_size()
        for r in range(height):
            a, b = d0 + r * d_pitch, s0 + r * s_pitch
            d_bytes[a : a + width] = s_bytes[b : b + width]
        return d_bytes

    def expected(dst, src):
        want = storage_bytes(dst)
        want.view(dst.dtype).as_strided(dst.shape, dst.stride(), dst.storage_offset()).copy_(src)
        return want

    torch.manual_seed(0)
    x = torch.randn(2, 8, 6, 4).to(torch.bfloat16)  # [batch, heads, seq, dim]
    g = torch.zeros(2, 4, 12, 4, dtype=torch.bfloat16)  # 4 heads, the whole sequence
    seq = x.transpose(1, 2).contiguous()  # [batch, seq, heads, dim] in memory
    gs = torch.zeros(2, 12, 4, 4, dtype=torch.bfloat16)
    cases = [
        (g[0, :, 3:6], x[0, 4:8, 0:3]),  # 3 tokens of 4 heads, head-major: rows per head
        (g[1, 1:3, 6:12], x[0, 2:4]),  # 2 heads' whole shard into the second half
        (gs[0, 3:6], seq[0, 0:3, 4:8]),  # sequence-major: rows per token
        (gs[1].transpose(0, 1)[:, 6:9], seq[1, 3:6, 4:8].transpose(0, 1)),  # as BHSD views
        (g[1, 2, 0:6], x[1, 5].clone()),  # contiguous both
    ]
    # the first by hand: rows of 3 tokens x 4 dims (24 bytes), one per head, 96 bytes apart in
    # g and 48 in x
    assert copy_rows(*cases[0], "put_2d") == (96, 48, 24, 4)
    for dst, src in cases:
        dst.fill_(float("nan"))  # poisoned: an element the copy misses keeps its NaN
        assert torch.equal(simulate(dst, src), expected(dst, src))


def test_copy_rows_refuses_what_one_copy_cannot_do():
    import torch

    x = torch.zeros(2, 8, 6, 4)
    g = torch.zeros(2, 8, 6, 4)
    for bad in (x[:, 2:5, 1:4], x[:, :, 1:4, :2]):  # two strided levels
        dst = torch.zeros(bad.shape)
        with pytest.raises(gshmem.UsageError, match="not rows at one pitch|overlap"):
            copy_rows(dst, bad, "put_2d")
    with pytest.raises(gshmem.UsageError, match="must match"):
        copy_rows(g[0], x[1].double(), "put_2d")
    dst = torch.zeros(3, 16).view(3, 4, 4)[:, :2]  # rows of 8 elements at pitch 16
    src = torch.zeros(3, 2, 8)[:, :, :4]  # rows of 4 at pitch 8
    with pytest.raises(gshmem.UsageError, match="rows of different lengths"):
        copy_rows(dst, src, "put_2d")


def test_common_rows():
    assert common_rows((64, 16, 4), (32, 16, 4), "p") == (64, 32, 16, 4)  # same rows
    assert common_rows((64, 64, 1), (32, 16, 4), "p") == (16, 32, 16, 4)  # contiguous dst
    assert common_rows((64, 16, 4), (64, 64, 1), "p") == (64, 16, 16, 4)  # contiguous src
    with pytest.raises(gshmem.UsageError, match="rows of different lengths"):
        common_rows((64, 32, 2), (32, 16, 4), "p")
