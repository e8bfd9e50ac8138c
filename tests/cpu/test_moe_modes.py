"""gshmem.moe.Buffer's combine mode (high throughput): the argument, else GSHMEM_MOE_COMBINE,
else push below PULL_FROM_WORLD ranks and pull from there; anything else is a usage error
naming where it came from."""

from __future__ import annotations

import pytest

from gshmem._errors import UsageError
from gshmem.moe.high_throughput import combine_mode


@pytest.mark.parametrize(
    ("given", "env", "world", "want"),
    [
        (None, {}, 1, "push"),
        (None, {}, 2, "push"),
        (None, {}, 3, "push"),  # measured: push below 4 ranks, pull from 4 (docs/moe.md)
        (None, {}, 4, "pull"),
        (None, {}, 8, "pull"),
        (None, {"GSHMEM_MOE_COMBINE": "pull"}, 2, "pull"),
        (None, {"GSHMEM_MOE_COMBINE": " Push "}, 8, "push"),  # the variable beats the size
        ("push", {"GSHMEM_MOE_COMBINE": "pull"}, 2, "push"),  # the argument wins
        ("pull", {}, 2, "pull"),
        ("push", {}, 8, "push"),
    ],
)
def test_combine_mode(given, env, world, want) -> None:
    assert combine_mode(world, given, env) == want


@pytest.mark.parametrize(("given", "env", "where"), [
    ("gather", {}, "combine='gather'"),
    (None, {"GSHMEM_MOE_COMBINE": "both"}, "GSHMEM_MOE_COMBINE='both'"),
])  # fmt: skip
def test_bad_combine_mode(given, env, where) -> None:
    with pytest.raises(UsageError, match=where):
        combine_mode(2, given, env)
