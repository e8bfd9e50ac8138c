"""The copy-engine permute's protocol (src/coll/permute_plan.h) on a model of every PE's stream:
random sequences of permutations, the same on every PE as an SPMD program makes them, run to the
end under random interleavings without deadlock, leave every flag at 0, and put each call's data
into a receiver's ``out`` only after that receiver announced it free for that call and before its
arrival wait returns; the same for the exchanges of the collectives through the proxy (several
peers each way, random teams, mixed with permutations). A plan that waits before it announces
deadlocks in the same model."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from gshmem import _C

Plan = Callable[..., list[tuple[str, int]]]


def calls(n: int, count: int, rng: random.Random) -> list[list[tuple[int, int]]]:
    """`count` calls; call k gives each PE its (dst, src): a random permutation with some of its
    edges dropped (the sender's dst and the receiver's src become -1; a dropped self edge is
    (-1, -1))."""
    out = []
    for _ in range(count):
        perm = list(range(n))
        rng.shuffle(perm)
        dst, src = [-1] * n, [-1] * n
        for p, q in enumerate(perm):
            if rng.random() < 0.8:
                dst[p], src[q] = q, p
        out.append(list(zip(dst, src, strict=True)))
    return out


def run(n: int, sequence: list[list], plan: Plan, rng: random.Random) -> None:
    """Runs every PE's plans for `sequence` (call k gives PE p the arguments ``sequence[k][p]``
    of ``plan(p, *args)``) on a model of its stream, one runnable step at a time in random order;
    raises AssertionError on a deadlock or a broken property. Each PE's `out` holds a region per
    sender (a permute's receiver has one sender per call, an exchange's several)."""
    steps = [[(k, step, pe) for k, call in enumerate(sequence) for step, pe in plan(me, *call[me])]
             for me in range(n)]  # fmt: skip
    ready = [[0] * n for _ in range(n)]  # ready[owner][q]: q's out is free for owner's data
    arrived = [[0] * n for _ in range(n)]  # arrived[owner][q]: q's data is in owner's out
    region: list[list[int | None]] = [[None] * n for _ in range(n)]  # [owner][sender]: its call
    announced = [[-1] * n for _ in range(n)]  # [p][q]: the last call p announced its out to q
    at = [0] * n

    def runnable(p: int) -> bool:
        if at[p] == len(steps[p]):
            return False
        _, step, q = steps[p][at[p]]
        if step == "await_ready":
            return ready[p][q] == 1
        if step == "await_arrival":
            return arrived[p][q] == 1
        return True

    while any(at[p] < len(steps[p]) for p in range(n)):
        free = [p for p in range(n) if runnable(p)]
        waiting = [steps[p][at[p]] for p in range(n) if at[p] < len(steps[p])]
        assert free, f"deadlock: every unfinished PE waits: {waiting}"
        p = rng.choice(free)
        k, step, q = steps[p][at[p]]
        at[p] += 1
        if step in ("copy", "zero"):
            continue  # this PE's out alone
        if step == "announce":
            assert ready[q][p] == 0, f"PE {p} announces to {q} twice (call {k})"
            ready[q][p], announced[p][q] = 1, k
        elif step == "await_ready":
            ready[p][q] = 0
        elif step == "send":
            assert announced[q][p] == k, f"PE {p} writes PE {q}'s out before it is free (call {k})"
            assert arrived[q][p] == 0, f"PE {p}'s earlier data to {q} still unclaimed (call {k})"
            region[q][p], arrived[q][p] = k, 1
        else:
            assert step == "await_arrival"
            arrived[p][q] = 0
            assert region[p][q] == k, (
                f"PE {p} holds call {region[p][q]}'s data from {q} in call {k}"
            )
    assert not any(map(any, ready)) and not any(map(any, arrived)), "a flag is left set"


def exchanges(n: int, count: int, rng: random.Random) -> list[list[tuple[list[int], list[int]]]]:
    """`count` calls as the collectives through the proxy make them (exchange.cpp), over random
    teams (start, stride, size): all_gather and all_to_all (member me sends to me + k and
    receives from me - k, k = 1 .. size - 1), broadcast from a random root, and a permutation."""
    out = []
    for _ in range(count):
        stride = rng.choice([s for s in (1, 2, 3) if s < n] or [1])
        size = rng.randint(1, (n - 1) // stride + 1)
        start = rng.randint(0, n - 1 - (size - 1) * stride)
        members = [start + t * stride for t in range(size)]
        call: list[tuple[list[int], list[int]]] = [([], []) for _ in range(n)]
        kind = rng.choice(["ring", "broadcast", "permute"])
        perm = list(range(size))
        rng.shuffle(perm)
        root = rng.randrange(size)
        for t, pe in enumerate(members):
            if kind == "ring":
                dsts = [members[(t + k) % size] for k in range(1, size)]
                srcs = [members[(t - k) % size] for k in range(1, size)]
            elif kind == "broadcast":
                dsts = [members[(t + k) % size] for k in range(1, size)] if t == root else []
                srcs = [] if t == root else [members[root]]
            else:
                to, frm = perm[t], perm.index(t)
                dsts = [members[to]] if to != t else []
                srcs = [members[frm]] if frm != t else []
            call[pe] = (dsts, srcs)
        out.append(call)
    return out


def test_the_plans_of_one_pe():
    assert _C.permute_plan(2, 2, 2) == [("copy", 2)]
    assert _C.permute_plan(0, 1, 3) == [("announce", 3), ("await_ready", 1), ("send", 1),
                                        ("await_arrival", 3)]  # fmt: skip
    assert _C.permute_plan(0, 1, -1) == [("zero", 0), ("await_ready", 1), ("send", 1)]
    assert _C.permute_plan(1, -1, 0) == [("announce", 0), ("await_arrival", 0)]
    assert _C.permute_plan(1, -1, -1) == [("zero", 1)]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 8])
def test_sequences_end_with_every_flag_down(n):
    rng = random.Random(n)
    for _ in range(30):
        run(n, calls(n, 12, rng), _C.permute_plan, rng)


def test_the_model_catches_a_plan_that_waits_before_it_announces():
    def waits_first(me: int, dst: int, src: int) -> list[tuple[str, int]]:
        plan = _C.permute_plan(me, dst, src)
        return sorted(plan, key=lambda s: s[0] != "await_ready")

    ring = [[((p + 1) % 3, (p - 1) % 3) for p in range(3)]]
    with pytest.raises(AssertionError, match="deadlock"):
        run(3, ring, waits_first, random.Random(0))


def test_the_exchange_plan_announces_to_every_source_before_it_waits():
    assert _C.exchange_plan([1, 2], [3, 2]) == [
        ("announce", 3), ("announce", 2), ("await_ready", 1), ("send", 1), ("await_ready", 2),
        ("send", 2), ("await_arrival", 3), ("await_arrival", 2),
    ]  # fmt: skip
    assert _C.exchange_plan([], []) == []


@pytest.mark.parametrize("n", [1, 2, 3, 4, 8])
def test_collective_exchanges_and_permutes_mixed_end_with_every_flag_down(n):
    rng = random.Random(100 + n)
    for _ in range(30):
        run(n, exchanges(n, 12, rng), lambda me, dsts, srcs: _C.exchange_plan(dsts, srcs), rng)


def test_the_model_catches_an_exchange_that_waits_for_arrivals_first():
    def arrivals_first(me: int, dsts: list[int], srcs: list[int]) -> list[tuple[str, int]]:
        plan = _C.exchange_plan(dsts, srcs)
        return sorted(plan, key=lambda s: s[0] != "await_arrival")

    ring = [[([(p + 1) % 3, (p + 2) % 3], [(p + 2) % 3, (p + 1) % 3]) for p in range(3)]]
    with pytest.raises(AssertionError, match="deadlock"):
        run(3, ring, arrivals_first, random.Random(0))
