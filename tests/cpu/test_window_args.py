"""Windows' host side without a GPU (python/gshmem/window.py): the argument checks every PE
makes before the collective, and the by-value layout kernels receive."""

from __future__ import annotations

import ctypes

import pytest
import torch

from gshmem import _C, UsageError
from gshmem.buffer import Buffer
from gshmem.window import MAX_CONTEXTS, MAX_PER_CONTEXT, WindowStruct, check_counts, memory_of


def test_the_layout_matches_the_c_struct():
    assert ctypes.sizeof(WindowStruct) == _C.WINDOW_STATE_SIZE
    assert _C.WINDOW_STATE_VERSION == 2
    # every field 8-byte aligned after the six 32-bit ones, as in device_state.h
    assert WindowStruct.bases.offset == 24 and WindowStruct.counters.offset == 48
    assert WindowStruct.signal_offset.offset == 56 and WindowStruct.proxy_region.offset == 64
    assert WindowStruct.counter_first.offset == 68 and ctypes.sizeof(WindowStruct) == 72


@pytest.mark.parametrize("counts", [(1, 0, 0), (4, 2, 2), (MAX_CONTEXTS, MAX_PER_CONTEXT, 1)])
def test_counts_in_range_are_accepted(counts):
    check_counts(*counts)


@pytest.mark.parametrize(
    "counts, words",
    [
        ((0, 1, 1), "contexts must be an int in [1, 65536], got 0"),
        ((MAX_CONTEXTS + 1, 1, 1), "contexts"),
        ((1, -1, 1), "signals must be"),
        ((1, 1, MAX_PER_CONTEXT + 1), "counters must be"),
        ((True, 1, 1), "got True"),
        ((1, 2.0, 1), "got 2.0"),
    ],
)
def test_counts_out_of_range_are_usage_errors(counts, words):
    with pytest.raises(UsageError, match="register_window") as e:
        check_counts(*counts)
    assert words in str(e.value)


def test_memory_must_be_a_cuda_tensor_or_a_buffer():
    with pytest.raises(UsageError, match="the tensor is on cpu"):
        memory_of(torch.zeros(8), 0)
    with pytest.raises(UsageError, match="expected a CUDA tensor or a gshmem Buffer, got bytes"):
        memory_of(b"abc", 0)
    assert memory_of(Buffer(None, 0x1000, 256, 0), 0) == (0x1000, 256)
