"""gshmem.moe.Buffer's combine mode (high throughput): the argument, else GSHMEM_MOE_COMBINE,
else push; anything else is a usage error naming where it came from."""

from __future__ import annotations

import pytest

from gshmem._errors import UsageError
from gshmem.moe.high_throughput import combine_mode


@pytest.mark.parametrize(
    ("given", "env", "want"),
    [
        (None, {}, "push"),
        (None, {"GSHMEM_MOE_COMBINE": "pull"}, "pull"),
        (None, {"GSHMEM_MOE_COMBINE": " Pull "}, "pull"),
        ("push", {"GSHMEM_MOE_COMBINE": "pull"}, "push"),  # the argument wins
        ("pull", {}, "pull"),
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
