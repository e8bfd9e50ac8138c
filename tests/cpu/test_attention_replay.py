"""The replay policy and bookkeeping of gshmem.attention.replay (the capture itself needs a GPU:
tests/gpu/scripts/attention_check.py, scenario replay)."""

from __future__ import annotations

import pytest

from gshmem import UsageError
from gshmem.attention import replay


@pytest.mark.parametrize(
    "env,backend,elements,capturing,want",
    [
        # measured: replayed to 4K tokens per GPU x 32 heads x 128 (replay.py), eager above
        ("auto", "gshmem", 4096 * 32 * 128, False, True),
        ("auto", "gshmem", 4096 * 32 * 128 + 1, False, False),
        ("auto", "nccl", 1, False, False),
        ("auto", "gshmem", 1, True, False),
        ("1", "gshmem", 1 << 40, False, True),
        ("1", "gshmem", 1, True, False),
        ("1", "nccl", 1, False, False),
        ("0", "gshmem", 1, False, False),
    ],
)
def test_policy(monkeypatch, env, backend, elements, capturing, want):
    monkeypatch.setenv("GSHMEM_ATTENTION_GRAPHS", env)
    assert replay.wanted(backend, elements, capturing) is want


def test_policy_rejects_unknown_settings(monkeypatch):
    monkeypatch.setenv("GSHMEM_ATTENTION_GRAPHS", "sometimes")
    with pytest.raises(UsageError, match="auto, 0 or 1"):
        replay.wanted("gshmem", 1, False)


def test_first_call_is_eager_then_captured_then_replayed(monkeypatch):
    made = []

    class FakeReplay:
        def __init__(self, fn, inputs):
            made.append(list(inputs))
            self.fn = fn

        def __call__(self, inputs):
            return ("replayed", *self.fn(*inputs))

    monkeypatch.setattr(replay, "Replay", FakeReplay)
    cache: dict = {}
    fn = lambda a, b: (a + b,)  # noqa: E731
    assert replay.run(cache, ("forward", 1), fn, (1, 2)) == (3,)
    assert cache[("forward", 1)] == replay.SEEN and not made
    assert replay.run(cache, ("forward", 1), fn, (3, 4)) == ("replayed", 7)
    assert made == [[3, 4]]
    assert replay.run(cache, ("forward", 1), fn, (5, 6)) == ("replayed", 11)
    assert len(made) == 1  # captured once
    assert replay.run(cache, ("backward", 1), fn, (1, 1)) == (2,)  # another key: eager again
