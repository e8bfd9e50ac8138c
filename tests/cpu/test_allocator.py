"""The symmetric heap's first-fit allocator (C++), tested on its own: no GPU needed."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gshmem import _C, UsageError


def grown(end: int) -> _C.Allocator:
    a = _C.Allocator()
    a.grow(end)
    return a


def test_first_fit_reuses_the_lowest_hole():
    a = grown(1 << 20)
    x = a.allocate(1000, 256)
    y = a.allocate(1000, 256)
    z = a.allocate(1000, 256)
    assert (x, y, z) == (0, 1024, 2048)
    a.release(y)
    assert a.allocate(500, 256) == 1024  # the hole left by y, not the end
    assert a.allocate(600, 256) == 3072  # does not fit in the rest of the hole (1524..2048)


def test_neighbours_coalesce_on_release():
    a = grown(4096)
    blocks = [a.allocate(1024, 1024) for _ in range(4)]
    assert blocks == [0, 1024, 2048, 3072]
    assert a.allocate(1, 1) is None  # full
    for off in (blocks[0], blocks[2], blocks[1]):  # middle last: must merge three into one
        a.release(off)
    assert a.free_blocks == 1
    assert a.allocate(3072, 1024) == 0


def test_alignment_is_honoured_and_padding_stays_free():
    a = grown(1 << 16)
    assert a.allocate(3, 1) == 0
    assert a.allocate(8, 4096) == 4096
    assert a.allocate(100, 8) == 8  # the padding before 4096 is still usable


def test_exhaustion_and_growth():
    a = grown(1024)
    assert a.allocate(2048, 256) is None
    need = a.end_needed(2048, 256)
    assert need == 2048  # the free block at 0 is extended, not skipped
    a.grow(need)
    assert a.allocate(2048, 256) == 0
    assert a.end_needed(100, 4096) == 4096 + 100  # nothing free at the end: start past it


def test_bad_arguments_raise_usage_errors():
    a = grown(1024)
    with pytest.raises(UsageError, match="power of two"):
        a.allocate(10, 3)
    with pytest.raises(UsageError, match="positive"):
        a.allocate(0, 8)
    off = a.allocate(10, 8)
    a.release(off)
    with pytest.raises(UsageError, match="double free"):
        a.release(off)
    with pytest.raises(UsageError, match="shrink"):
        a.grow(10)


ops = st.lists(
    st.one_of(
        st.tuples(st.just("alloc"), st.integers(1, 5000), st.sampled_from([1, 8, 256, 4096])),
        st.tuples(st.just("free"), st.integers(0, 1000), st.just(0)),
        st.tuples(st.just("grow"), st.integers(1, 20000), st.just(0)),
    ),
    max_size=200,
)


def replay(seq: list[tuple[str, int, int]]) -> tuple[list[int | None], _C.Allocator]:
    """Runs a sequence, checking the invariants after every step; returns what alloc returned."""
    a = grown(8192)
    live: dict[int, int] = {}
    returned: list[int | None] = []
    for op, x, y in seq:
        if op == "alloc":
            off = a.allocate(x, y)
            returned.append(off)
            if off is None:
                assert a.end_needed(x, y) > a.end
                continue
            assert off % y == 0
            assert off + x <= a.end
            for o, s in live.items():  # no overlap with any live block
                assert off + x <= o or o + s <= off
            live[off] = x
        elif op == "free" and live:
            off = sorted(live)[x % len(live)]
            assert a.release(off) == live.pop(off)
        elif op == "grow":
            a.grow(a.end + x)
        assert a.in_use == sum(live.values())
        assert a.live_blocks == len(live)
    return returned, a


@settings(max_examples=300, deadline=None)
@given(ops)
def test_property_no_overlap_alignment_accounting(seq):
    replay(seq)


class FirstFit:
    """The allocator's rule written plainly: free ranges in address order, the first one where
    the aligned start fits; the alignment padding stays free; freed ranges merge with their
    neighbours; growing extends a free range that reaches the old end."""

    def __init__(self, end: int) -> None:
        self.end, self.free, self.live = end, [(0, end)], {}

    def allocate(self, size: int, align: int) -> int | None:
        for i, (s, e) in enumerate(self.free):
            at = -(-s // align) * align
            if at + size <= e:
                self.free[i : i + 1] = [r for r in ((s, at), (at + size, e)) if r[0] < r[1]]
                self.live[at] = size
                return at
        return None

    def release(self, off: int) -> None:
        self._add_free(off, off + self.live.pop(off))

    def grow(self, end: int) -> None:
        self._add_free(self.end, end)
        self.end = end

    def _add_free(self, start: int, stop: int) -> None:
        merged: list[tuple[int, int]] = []
        for s, e in sorted([*self.free, (start, stop)]):
            if merged and s == merged[-1][1]:
                merged[-1] = (merged[-1][0], e)
            else:
                merged.append((s, e))
        self.free = merged


@settings(max_examples=200, deadline=None)
@given(ops)
def test_property_offsets_are_first_fit(seq):
    # Every PE making the same calls gets the same offsets (what makes the heap symmetric),
    # and they are the ones first fit gives: checked against the rule written plainly.
    model = FirstFit(8192)
    returned = iter(replay(seq)[0])
    for op, x, y in seq:
        if op == "alloc":
            assert next(returned) == model.allocate(x, y)
        elif op == "free" and model.live:
            model.release(sorted(model.live)[x % len(model.live)])
        elif op == "grow":
            model.grow(model.end + x)


@settings(max_examples=200, deadline=None)
@given(ops)
def test_property_end_needed_is_the_least_end_that_fits(seq):
    """Whenever a request does not fit: growing to end_needed makes it fit, at the offset first
    fit gives, and one byte less would not (tried on a copy of the model)."""
    a, model = grown(8192), FirstFit(8192)
    for op, x, y in seq:
        if op == "alloc":
            off = a.allocate(x, y)
            assert off == model.allocate(x, y)
            if off is None:
                need = a.end_needed(x, y)
                less = copy.deepcopy(model)
                less.grow(need - 1)
                assert less.allocate(x, y) is None
                a.grow(need)
                model.grow(need)
                assert a.allocate(x, y) == model.allocate(x, y) is not None
        elif op == "free" and model.live:
            off = sorted(model.live)[x % len(model.live)]
            a.release(off)
            model.release(off)
        elif op == "grow":
            a.grow(a.end + x)
            model.grow(model.end + x)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 3000), st.sampled_from([1, 64, 512, 4096])), max_size=60),
    st.randoms(use_true_random=False),
)
def test_property_freeing_everything_coalesces_to_one_block(requests, rng):
    a = grown(1 << 16)
    offs = [off for size, align in requests if (off := a.allocate(size, align)) is not None]
    rng.shuffle(offs)
    for off in offs:
        a.release(off)
    assert a.in_use == 0
    assert a.free_blocks == 1
    assert a.allocate(1 << 16, 1) == 0
