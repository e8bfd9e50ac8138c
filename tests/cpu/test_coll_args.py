"""Argument handling of the collectives that needs no GPU: dtype and operator codes (the C ABI's
enums), operator names, team arguments, all_to_allv counts and displacements, tensor checks."""

from __future__ import annotations

import pytest
import torch

import gshmem
from gshmem import _C
from gshmem._coll_args import checked_counts, checked_displs, coll_tensor, redop_code, team_arg
from gshmem.team import Team


def test_dtype_codes_match_the_c_abi():
    assert dict(_C.COLL_DTYPES) == {
        "float32": 0,
        "bfloat16": 1,
        "float16": 2,
        "int32": 3,
        "int64": 4,
    }


@pytest.mark.parametrize(("name", "code"), [("sum", 0), ("prod", 1), ("min", 2), ("max", 3)])
def test_redop_names_match_the_c_abi(name, code):
    assert redop_code(name) == code
    assert redop_code(name.upper()) == code


@pytest.mark.parametrize("bad", ["avg", "", 0, None])
def test_bad_redop_is_a_usage_error(bad):
    with pytest.raises(gshmem.UsageError, match="op must be one of 'sum', 'prod', 'min', 'max'"):
        redop_code(bad)


def test_team_argument():
    assert team_arg(None) is None
    assert team_arg(Team(1, 2, 3, 0)) == (1, 2, 3, 0)
    with pytest.raises(gshmem.UsageError, match="team must be a gshmem.Team or None"):
        team_arg((0, 1, 2, 0))


def test_all_to_allv_counts_and_default_displacements():
    counts = checked_counts([3, 0, 5], 3, "send_counts")
    assert counts == [3, 0, 5]
    assert checked_displs(None, counts, "send_displs") == [0, 3, 3]
    assert checked_displs([10, 20, 30], counts, "send_displs") == [10, 20, 30]
    with pytest.raises(gshmem.UsageError, match="has 2 entries; the team has 3 PEs"):
        checked_counts([1, 2], 3, "send_counts")
    with pytest.raises(gshmem.UsageError, match="must not be negative"):
        checked_counts([1, -2, 3], 3, "recv_counts")
    with pytest.raises(gshmem.UsageError, match=r"send_counts\[1\] must be an int"):
        checked_counts([1, 2.0, 3], 3, "send_counts")


def test_tensor_checks():
    with pytest.raises(gshmem.UsageError, match="collectives take float32, bfloat16"):
        coll_tensor(torch.ones(4, dtype=torch.float64), "all_reduce: t", 0)
    with pytest.raises(gshmem.UsageError, match="must be on cuda:0"):
        coll_tensor(torch.ones(4), "all_reduce: t", 0)
    with pytest.raises(gshmem.UsageError, match="must be a torch.Tensor"):
        coll_tensor([1.0], "all_reduce: t", 0)
