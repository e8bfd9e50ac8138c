"""The proxy path's descriptor queue (src/proxy/descriptor_queue.h) on the CPU: host threads as
producers, one consumer, as the GPU and the proxy thread will use it."""

from __future__ import annotations

import pytest

import gshmem
from gshmem import _C


def words(i: int) -> list[int]:
    return [i, *(i * 10 + k for k in range(1, 7))]


def test_descriptors_come_out_in_order_and_whole():
    q = _C.ProxyQueue(8)
    assert q.try_pop() is None  # empty
    for i in range(5):
        assert q.try_push(words(i))
    assert [q.try_pop() for _ in range(5)] == [words(i) for i in range(5)]
    assert q.try_pop() is None


def test_a_full_queue_refuses_until_the_consumer_frees_a_slot():
    q = _C.ProxyQueue(4)
    assert all(q.try_push(words(i)) for i in range(4))
    assert not q.try_push(words(99)), "a fifth descriptor would overwrite an unread slot"
    assert q.try_pop() == words(0)
    assert q.try_push(words(4))
    assert not q.try_push(words(5))
    assert [q.try_pop() for _ in range(4)] == [words(i) for i in range(1, 5)]


def test_slots_wrap_around_many_times():
    q = _C.ProxyQueue(2)
    for i in range(1000):
        assert q.try_push(words(i))
        assert q.try_pop() == words(i)


@pytest.mark.parametrize(("producers", "capacity"), [(1, 2), (4, 4), (16, 8), (64, 64)])
def test_many_producers_one_consumer_lose_nothing(producers, capacity):
    count = 20_000 // producers
    stats = _C.proxy_queue_stress(producers, count, capacity)
    # every producer's descriptors, each once and in its order (the harness raises otherwise)
    assert stats["per_producer"] == [count] * producers
    assert stats["popped"] == producers * count
    if producers > capacity:  # more producers than slots: some must have found it full
        assert stats["full_waits"] > 0


@pytest.mark.parametrize("capacity", [0, 1, 3, 100])
def test_capacity_must_be_a_power_of_two(capacity):
    with pytest.raises(gshmem.UsageError, match="power of two"):
        _C.ProxyQueue(capacity)


def test_a_descriptor_is_seven_words():
    with pytest.raises(gshmem.UsageError, match="7 words"):
        _C.ProxyQueue(4).try_push([1, 2, 3])


def test_quiets_of_one_batch_share_one_flush():
    # Blocking puts from many GPU threads arrive as put, quiet, put, quiet, ...: the proxy issues
    # every put of the batch, then starts one flush; retired stays at the first quiet (ticket 1)
    # until that flush finished, then covers the whole batch.
    ops = _C.PROXY_OPS
    trace, retired = _C.proxy_trace([ops["put"], ops["quiet"]] * 4)
    assert trace == [("put", 0)] + [("put", 1)] * 3 + [("flush_start", 1), ("flushed", 1)]
    assert retired == 8


def test_descriptors_after_a_quiet_go_out_while_its_flush_is_under_way():
    # The first quiet is a batch of its own; its flush is still under way when the next batch's
    # puts are issued (retired held at 0, the quiet's ticket); the second quiet's flush starts
    # before the first finished; retired then moves to 1 (the next quiet), then past all.
    ops = _C.PROXY_OPS
    trace, retired = _C.proxy_trace([ops["quiet"], ops["put"], ops["put"], ops["quiet"]])
    assert trace == [("flush_start", 0), ("put", 0), ("put", 0), ("flush_start", 0),
                     ("flushed", 0), ("flushed", 1)]  # fmt: skip
    assert retired == 4


def test_a_batch_without_quiets_retires_each_descriptor_as_it_goes():
    ops = _C.PROXY_OPS
    trace, retired = _C.proxy_trace([ops["put"], ops["put_value"], ops["put_value_signal"],
                                     ops["put_inline"], ops["put_inline_signal"], ops["get"],
                                     ops["fence"]])  # fmt: skip
    assert trace == [("put", 0), ("put_value", 1), ("put_value_signal", 2), ("put_inline", 3),
                     ("put_inline_signal", 4), ("get", 5), ("fence", 6)]  # fmt: skip
    assert retired == 7


def test_a_signal_after_a_held_quiet_is_still_fenced():
    # a signal orders itself behind everything before it (a fenced signal: the engine holds it
    # until a flush of every peer finished), quiet or not; the thread does not wait for it
    ops = _C.PROXY_OPS
    trace, _ = _C.proxy_trace([ops["put"], ops["quiet"], ops["signal"], ops["quiet"]])
    assert trace == [("put", 0), ("fenced_signal", 1), ("flush_start", 1), ("flushed", 1)]
