"""The copy-engine permute's protocol (src/coll/permute_plan.h) on a model of every PE's stream:
random sequences of permutations, the same on every PE as an SPMD program makes them, run to the
end under random interleavings without deadlock, leave every flag at 0, and put each call's data
into a receiver's ``out`` only after that receiver announced it free for that call and before its
arrival wait returns. A plan that waits before it announces deadlocks in the same model."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from gshmem import _C

Plan = Callable[[int, int, int], list[tuple[str, int]]]


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


def run(n: int, sequence: list[list[tuple[int, int]]], plan: Plan, rng: random.Random) -> None:
    """Runs every PE's plans for `sequence` on a model of its stream, one runnable step at a
    time in random order; raises AssertionError on a deadlock or a broken property."""
    steps = [[(k, step, pe) for k, call in enumerate(sequence) for step, pe in plan(me, *call[me])]
             for me in range(n)]  # fmt: skip
    ready = [[0] * n for _ in range(n)]  # ready[owner][q]: q's out is free for owner's data
    arrived = [[0] * n for _ in range(n)]  # arrived[owner][q]: q's data is in owner's out
    out: list[tuple[int, int | None] | None] = [None] * n  # (call, sender) of what out holds
    announced = [-1] * n  # the last call for which PE p announced its out free
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
        if step == "copy":
            out[p] = (k, p)
        elif step == "zero":
            out[p] = (k, None)
        elif step == "announce":
            assert ready[q][p] == 0, f"PE {p} announces to {q} twice (call {k})"
            ready[q][p], announced[p] = 1, k
        elif step == "await_ready":
            ready[p][q] = 0
        elif step == "send":
            assert announced[q] == k, f"PE {p} writes PE {q}'s out before it is free (call {k})"
            assert arrived[q][p] == 0, f"PE {p}'s earlier data to {q} still unclaimed (call {k})"
            out[q], arrived[q][p] = (k, p), 1
        else:
            assert step == "await_arrival"
            arrived[p][q] = 0
            assert out[p] == (k, q), f"PE {p} got {out[p]} in call {k}, not call {k}'s from {q}"
    assert not any(map(any, ready)) and not any(map(any, arrived)), "a flag is left set"


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
