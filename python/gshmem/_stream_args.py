"""Argument conversion for the on-stream operations (Comm.put, put_signal, signal_wait_until,
...): streams, byte spans of tensors and Buffers, signals, signal operations, comparisons. Every
bad argument raises UsageError here, before anything reaches the native library."""

from __future__ import annotations

import sys
from typing import Any

from gshmem import _C
from gshmem._errors import UsageError
from gshmem.buffer import Buffer

_SIGNAL_OPS = {"set": _C.SIGNAL_SET, "add": _C.SIGNAL_ADD}


def signal_op_code(op: object) -> int:
    """``"set"``/``"add"`` (any case) -> GSHMEM_SIGNAL_SET/ADD."""
    key = op.lower() if isinstance(op, str) else None
    if key not in _SIGNAL_OPS:
        raise UsageError(f"op must be 'set' or 'add', got {op!r}")
    return _SIGNAL_OPS[key]


def cmp_code(cmp: object) -> int:
    """``"eq"``, ``"ne"``, ``"gt"``, ``"ge"``, ``"lt"``, ``"le"`` (any case) -> GSHMEM_CMP_*."""
    key = cmp.lower() if isinstance(cmp, str) else None
    if key not in _C.CMPS:
        names = ", ".join(repr(k) for k in _C.CMPS)
        raise UsageError(f"cmp must be one of {names}, got {cmp!r}")
    return int(_C.CMPS[key])


def stream_handle(stream: Any, device: int) -> int:
    """The cudaStream_t (as an int) for ``stream``: None (torch's current stream on ``device``
    when torch is imported, else 0, the legacy default stream), an int handle, or an object with
    a ``cuda_stream`` handle (torch.cuda.Stream) on ``device``."""
    if stream is None:
        torch = sys.modules.get("torch")
        return int(torch.cuda.current_stream(device).cuda_stream) if torch is not None else 0
    if isinstance(stream, int) and not isinstance(stream, bool):
        if stream < 0:
            raise UsageError(f"stream handle must not be negative, got {stream}")
        return stream
    handle = getattr(stream, "cuda_stream", None)
    if isinstance(handle, int) and not isinstance(handle, bool):
        index = getattr(getattr(stream, "device", None), "index", device)
        if index is not None and index != device:
            raise UsageError(
                f"stream belongs to cuda:{index} but this comm's GPU is cuda:{device}; "
                f"use a stream created on cuda:{device}"
            )
        return handle
    raise UsageError(
        "stream must be a torch.cuda.Stream, an int cudaStream_t handle or None (torch's "
        f"current stream), got {type(stream).__name__}"
    )


def span(obj: Any, name: str, device: int) -> tuple[int, int]:
    """(address, bytes) of a contiguous tensor or a Buffer on cuda:``device``."""
    if isinstance(obj, Buffer):
        if obj.device != device:
            raise UsageError(f"{name} is a Buffer on cuda:{obj.device}, not on cuda:{device}")
        return obj.ptr, obj.nbytes
    address(obj, name, device, "a torch.Tensor or a gshmem.Buffer")
    if not obj.is_contiguous():
        raise UsageError(f"{name} is not contiguous; pass a contiguous tensor (.contiguous())")
    return obj.data_ptr(), obj.numel() * obj.element_size()


def address(obj: Any, name: str, device: int, kinds: str = "a torch.Tensor") -> int:
    """The address of a tensor (any strides) on cuda:``device``."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(obj, torch.Tensor):
        raise UsageError(f"{name} must be {kinds}, got {type(obj).__name__}")
    if obj.device.type != "cuda" or obj.device.index != device:
        raise UsageError(f"{name} is on {obj.device}; it must be on cuda:{device}, this comm's GPU")
    return obj.data_ptr()


def copy_rows(dst: Any, src: Any, op: str) -> tuple[int, int, int, int]:
    """(dst pitch, src pitch, width, height) in bytes of one 2-D copy of ``src`` into ``dst``
    (tensors of one shape and dtype, element i to element i): both, with their dimensions
    ordered by ``dst``'s strides, are rows of contiguous elements at one pitch (``row_layout``),
    such as a slice of heads or of tokens of a contiguous ``[batch, heads, seq, dim]`` tensor or
    of its sequence-major transpose."""
    if dst.shape != src.shape or dst.dtype != src.dtype:
        raise UsageError(f"{op}: dst {tuple(dst.shape)} {dst.dtype} and src "
                         f"{tuple(src.shape)} {src.dtype} must match")  # fmt: skip
    order = sorted(range(dst.dim()), key=lambda i: -dst.stride(i))
    d, s = dst.permute(order), src.permute(order)
    item = dst.element_size()
    return common_rows(row_layout(d.shape, d.stride(), item, f"{op}: dst"),
                       row_layout(s.shape, s.stride(), item, f"{op}: src"), op)  # fmt: skip


def row_layout(shape, strides, itemsize: int, name: str) -> tuple[int, int, int]:
    """(pitch, width, height) in bytes of a strided layout (sizes and strides, in the order
    given) that is rows of contiguous elements at one pitch; sizes-1 dimensions are ignored,
    anything else (two strided levels, overlapping rows) is a UsageError."""
    dims = [(n, st) for n, st in zip(shape, strides, strict=True) if n != 1]
    width = 1
    while dims and dims[-1][1] == width:  # the contiguous run at the end: one row
        width *= dims.pop()[0]
    if not dims:
        return width * itemsize, width * itemsize, 1
    height, pitch = dims[-1]
    for n, st in reversed(dims[:-1]):  # the outer dimensions must continue one pitch
        if st != pitch * height:
            raise UsageError(
                f"{name}: a view of shape {tuple(shape)} and strides {tuple(strides)} is not rows "
                "at one pitch; pass a contiguous tensor or a slice of one along one dimension"
            )
        height *= n
    if pitch < width:
        raise UsageError(f"{name}: rows of {width} elements overlap at pitch {pitch}")
    return pitch * itemsize, width * itemsize, height


def common_rows(dst, src, op: str) -> tuple[int, int, int, int]:
    """(dst pitch, src pitch, width, height) of one copy between two layouts of equal bytes,
    each (pitch, width, height) from ``row_layout``: equal rows, or a contiguous side cut into
    the other side's rows."""
    (dp, dw, dh), (sp, sw, sh) = dst, src
    if dw == sw:
        return dp, sp, dw, dh
    if dh == 1:
        return sw, sp, sw, sh
    if sh == 1:
        return dp, dw, dw, dh
    raise UsageError(f"{op}: dst and src are rows of different lengths ({dw} and {sw} bytes); "
                     "make one of them contiguous")  # fmt: skip


def signal_ptr(sig: Any, op: str, device: int) -> int:
    """Address of a signal: one int64/uint64 element of a tensor, or an 8-byte Buffer."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(sig, torch.Tensor):
        if sig.dtype not in (torch.int64, torch.uint64) or sig.numel() != 1:
            raise UsageError(
                f"{op}: sig must be one int64/uint64 element (e.g. sigs[i:i+1] of a symmetric "
                f"int64 tensor), got {sig.numel()} element(s) of {sig.dtype}"
            )
    elif isinstance(sig, Buffer):
        if sig.nbytes != 8:
            raise UsageError(f"{op}: a Buffer used as sig must be 8 bytes, got {sig.nbytes}")
    return span(sig, f"{op}: sig", device)[0]


def same_size(op: str, dst_bytes: int, src_bytes: int) -> None:
    if dst_bytes != src_bytes:
        raise UsageError(
            f"{op}: dst has {dst_bytes} bytes but src has {src_bytes}; they must match "
            "(slice the larger one)"
        )


__all__ = ["cmp_code", "same_size", "signal_op_code", "signal_ptr", "span", "stream_handle"]
