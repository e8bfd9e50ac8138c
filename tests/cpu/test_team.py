"""Team arithmetic (src/team/, through the C ABI): split_strided, split_2d, translate_pe."""

from __future__ import annotations

import itertools

import pytest

import gshmem
from gshmem.team import Team


def world(n: int, me: int) -> Team:
    return Team(0, 1, n, me)


def test_split_strided_members_and_rank():
    for n, me in itertools.product(range(1, 9), range(8)):
        if me >= n:
            continue
        parent = world(n, me)
        for start, stride in itertools.product(range(n), range(1, n + 1)):
            for size in range(1, (n - 1 - start) // stride + 2):
                child = parent.split_strided(start, stride, size)
                members = [start + i * stride for i in range(size)]
                assert child.members() == members
                assert child.rank == (members.index(me) if me in members else -1)


def test_split_of_a_split_composes_strides():
    evens = world(8, 6).split_strided(0, 2, 4)  # 0 2 4 6
    assert (evens.start, evens.stride, evens.size, evens.rank) == (0, 2, 4, 3)
    upper = evens.split_strided(1, 2, 2)  # evens 1, 3 -> world 2, 6
    assert upper.members() == [2, 6] and upper.rank == 1
    assert world(8, 5).split_strided(1, 2, 4).split_strided(2, 1, 2).members() == [5, 7]


@pytest.mark.parametrize(
    "start,stride,size",
    [(-1, 1, 2), (0, 0, 2), (0, -1, 2), (0, 1, 0), (0, 1, 5), (3, 1, 2), (0, 2, 3)],
)
def test_split_strided_rejects_ranges_outside_the_parent(start, stride, size):
    with pytest.raises(gshmem.UsageError):
        world(4, 0).split_strided(start, stride, size)


def test_non_member_cannot_split():
    outsider = world(8, 1).split_strided(0, 2, 4)
    assert outsider.rank == -1
    with pytest.raises(gshmem.UsageError, match="not a member"):
        outsider.split_strided(0, 1, 2)


@pytest.mark.parametrize("n", range(1, 13))
@pytest.mark.parametrize("xrange", range(1, 14))
def test_split_2d_rows_and_columns(n, xrange):
    xr = min(xrange, n)
    rows: dict[int, list[int]] = {}
    cols: dict[int, list[int]] = {}
    for me in range(n):
        x, y = world(n, me).split_2d(xrange)
        assert me in x.members() and me in y.members()
        assert x.rank == me % xr and y.rank == me // xr
        assert x.members() == list(range(me - me % xr, min(me - me % xr + xr, n)))
        assert y.members() == list(range(me % xr, n, xr))
        rows.setdefault(x.members()[0], x.members())
        cols.setdefault(y.members()[0], y.members())
    # rows and columns each partition the parent
    assert sorted(sum(rows.values(), [])) == list(range(n))
    assert sorted(sum(cols.values(), [])) == list(range(n))


def test_split_2d_of_a_strided_parent():
    odds = world(12, 7).split_strided(1, 2, 6)  # 1 3 5 7 9 11; world 7 is index 3
    x, y = odds.split_2d(4)
    assert x.members() == [1, 3, 5, 7] and x.rank == 3
    assert y.members() == [7] and y.rank == 0
    with pytest.raises(gshmem.UsageError):
        odds.split_2d(0)


def test_translate_pe():
    w = world(8, 0)
    evens = w.split_strided(0, 2, 4)
    upper = w.split_strided(4, 1, 4)
    for pe in range(4):
        assert evens.translate_pe(pe, w) == 2 * pe
        assert upper.translate_pe(pe, w) == 4 + pe
        assert evens.translate_pe(pe, upper) == ({4: 0, 6: 2}.get(2 * pe, -1))
        assert w.translate_pe(2 * pe, evens) == pe
        assert w.translate_pe(2 * pe + 1, evens) == -1
    assert evens.translate_pe(4, w) == -1 and evens.translate_pe(-1, w) == -1


def test_translate_pe_rejects_malformed_teams():
    with pytest.raises(gshmem.UsageError, match="malformed"):
        Team(0, 0, 4, 0).translate_pe(0, world(4, 0))


def test_team_bytes_are_the_c_struct():
    t = Team(2, 3, 4, 1)
    assert bytes(t) == (2).to_bytes(4, "little") + (3).to_bytes(4, "little") + (4).to_bytes(
        4, "little"
    ) + (1).to_bytes(4, "little")
    a = t.numpy()  # the record a kernel argument array holds: named fields, the same values
    assert a.shape == (1,) and a.dtype.names == ("start", "stride", "size", "my_pe")
    assert [int(a[f][0]) for f in a.dtype.names] == [2, 3, 4, 1]
