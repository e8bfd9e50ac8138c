"""gshmem.moe.Buffer's combine mode (high throughput): the argument, else GSHMEM_MOE_COMBINE,
else pull; anything else is a usage error naming where it came from."""

from __future__ import annotations

import pytest

from gshmem._errors import UsageError
from gshmem.moe.high_throughput import combine_mode


@pytest.mark.parametrize(
    ("given", "env", "want"),
    [
        (None, {}, "pull"),
        (None, {"GSHMEM_MOE_COMBINE": "push"}, "push"),
        (None, {"GSHMEM_MOE_COMBINE": " Push "}, "push"),
        ("pull", {"GSHMEM_MOE_COMBINE": "push"}, "pull"),  # the argument wins
        ("push", {}, "push"),
    ],
)
def test_combine_mode(given, env, want) -> None:
    assert combine_mode(given, env) == want


@pytest.mark.parametrize(("given", "env", "where"), [
    ("gather", {}, "combine='gather'"),
    (None, {"GSHMEM_MOE_COMBINE": "both"}, "GSHMEM_MOE_COMBINE='both'"),
])  # fmt: skip
def test_bad_combine_mode(given, env, where) -> None:
    with pytest.raises(UsageError, match=where):
        combine_mode(given, env)
