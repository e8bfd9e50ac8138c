"""CPU tests of the all-gather schedule (gshmem.attention.gather_schedule / gather): its blocks
cover the mask exactly once, each writer sends one run per reader, the backward's receive slots
add up in contiguous runs, the policy that picks it, and the whole forward and backward run by
W threads over in-process mailboxes against exact attention."""

from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch")

from _ring_threads import run_ring  # noqa: E402
from test_attention_math import SCALE, assert_matches, reference  # noqa: E402

from gshmem import UsageError  # noqa: E402
from gshmem.attention import gather, layout, ring  # noqa: E402
from gshmem.attention import gather_schedule as gs  # noqa: E402
from gshmem.attention.algorithm import GATHER_MAX_BYTES, choose  # noqa: E402
from gshmem.attention.local import Dense  # noqa: E402
from gshmem.attention.schedule import ALL, FRONT, halves, part_range  # noqa: E402


def gathered_tokens(reader, world, kind, causal, pos):
    """The global positions in reader's gathered buffer, in order (checking each region's
    offset against the runs before it)."""
    half = len(pos[reader]) // 2
    got = []
    for r in gs.regions(world, kind, causal):
        if r.reader == reader:
            assert len(got) == r.at * half, (r, len(got))
            a, z = part_range(r.part, len(pos[r.owner]))
            got += pos[r.owner][a:z]
    assert len(got) == gs.gathered_halves(reader, world, kind, causal) * half
    return got


@pytest.mark.parametrize("world", range(1, 9))
@pytest.mark.parametrize("kind", ["zigzag", "contiguous"])
@pytest.mark.parametrize("causal", [True, False])
def test_gather_schedule_covers_the_mask_once(world, kind, causal):
    total = 4 * world
    pos = [list(layout.token_index(total, world, r, kind)) for r in range(world)]
    hits: dict[tuple[int, int], int] = {}

    def hit(i, j):
        hits[i, j] = hits.get((i, j), 0) + 1

    for r in range(world):
        mine, n_local = pos[r], len(pos[r])
        for i, j in itertools.product(range(n_local), range(n_local)):  # the masked block
            if not causal or j <= i:  # top-left causal in local order
                hit(mine[i], mine[j])
        keys = gathered_tokens(r, world, kind, causal, pos)
        blocks = gs.prefix_blocks(r, world, kind, causal)
        if blocks:
            assert blocks[-1][1] * (n_local // 2) == len(keys)  # the longest reads it all
        for name, n in blocks:
            a, z = part_range(name, n_local)
            for i, j in itertools.product(mine[a:z], keys[: n * (n_local // 2)]):
                hit(i, j)
    want = {(i, j) for i in range(total) for j in range(total) if not causal or j <= i}
    assert set(hits) == want
    assert set(hits.values()) == {1}


@pytest.mark.parametrize("world", range(2, 9))
@pytest.mark.parametrize("kind", ["zigzag", "contiguous"])
@pytest.mark.parametrize("causal", [True, False])
def test_each_writer_sends_one_run_per_reader_and_slots_are_runs(world, kind, causal):
    regs = gs.regions(world, kind, causal)
    pairs = [(r.owner, r.reader) for r in regs]
    assert len(pairs) == len(set(pairs)) and all(o != rd for o, rd in pairs)
    pos = [list(layout.token_index(4 * world, world, r, kind)) for r in range(world)]
    per_half = len(pos[0]) // 2
    keys = [gathered_tokens(r, world, kind, causal, pos) for r in range(world)]
    for owner in range(world):
        # from the tokens: every unmasked block whose keys hold some of owner's shard, and
        # which part of it they hold (all of it, its front half, or anything else: a defect)
        shard = frozenset(pos[owner])
        front = frozenset(pos[owner][slice(*part_range(FRONT, len(pos[owner])))])
        want = sorted(
            (reader, n, {shard: ALL, front: FRONT}.get(seen, f"split {sorted(seen)}"))
            for reader in range(world)
            for _, n in gs.prefix_blocks(reader, world, kind, causal)
            if (seen := shard.intersection(keys[reader][: n * per_half]))
        )
        got = gs.contributions(owner, world, kind, causal)
        assert sorted(got) == want
        runs = gs.sum_slots(owner, world, kind, causal)
        for half, (lo, hi) in runs.items():  # the slots summed into a half read that half
            assert lo == 0 and all(half in halves(c[2]) for c in got[lo:hi])
            assert hi == sum(half in halves(c[2]) for c in got)
        assert len(got) <= gs.max_slots(world, kind, causal) <= 2 * (world - 1)
    if kind == "zigzag" and causal:  # every rank gathers W-1 shards' worth of halves or less,
        # and the halves are balanced: rank r gathers 2W-2-r
        assert [gs.gathered_halves(r, world, kind, causal) for r in range(world)] == [
            2 * world - 2 - r for r in range(world)
        ]


def test_algorithm_policy(monkeypatch):
    monkeypatch.delenv("GSHMEM_ATTENTION_ALGORITHM", raising=False)
    small, big = 1 << 20, GATHER_MAX_BYTES
    hd = (32, 8)
    assert choose("auto", 4, 8192, False, small, hd) == "allgather"
    assert choose("auto", 4, 8192, False, big, hd) == "ring"  # 3 shards past the limit
    assert choose("auto", 2, 8192, False, big, hd) == "allgather"  # exactly at it
    assert choose("auto", 1, 8192, False, small, hd) == "ring"
    assert choose("auto", 4, 8192, True, small, hd) == "ring"  # documents: the ring
    assert choose("auto", 4, 8191, False, small, hd) == "ring"  # odd shard: the ring
    assert choose("auto", 2, 8192, False, small, gather_from=3) == "ring"  # JAX at two
    assert choose("auto", 3, 8192, False, small, gather_from=3) == "allgather"
    assert choose("allgather", 2, 8192, False, small, gather_from=3) == "allgather"  # asked for
    assert choose("allgather", 4, 8192, False, big, hd) == "allgather"
    assert choose("ring", 4, 8192, False, small, hd) == "ring"
    assert choose("heads", 4, 8191, False, big, hd) == "heads"  # any length, any size
    assert choose("heads", 1, 8192, False, small, hd) == "ring"  # one rank: nothing to move
    monkeypatch.setenv("GSHMEM_ATTENTION_ALGORITHM", "ring")
    assert choose("auto", 4, 8192, False, small, hd) == "ring"
    assert choose("allgather", 4, 8192, False, small, hd) == "allgather"  # explicit wins
    monkeypatch.setenv("GSHMEM_ATTENTION_ALGORITHM", "heads")
    assert choose("auto", 2, 8192, False, small, hd) == "heads"
    monkeypatch.setenv("GSHMEM_ATTENTION_ALGORITHM", "allgather")
    assert choose("auto", 4, 8192, False, big, hd) == "allgather"
    monkeypatch.setenv("GSHMEM_ATTENTION_ALGORITHM", "fast")
    with pytest.raises(UsageError, match="GSHMEM_ATTENTION_ALGORITHM"):
        choose("auto", 4, 8192, False, small, hd)
    with pytest.raises(UsageError, match="algorithm must be"):
        choose("tree", 4, 8192, False, small, hd)
    for algo in ("allgather", "heads"):
        with pytest.raises(UsageError, match="packed documents"):
            choose(algo, 4, 8192, True, small, hd)
    with pytest.raises(UsageError, match="even local length"):
        choose("allgather", 4, 8191, False, small, hd)
    with pytest.raises(UsageError, match="must both divide by 3"):
        choose("heads", 3, 8192, False, small, hd)
    with pytest.raises(UsageError, match="not available here"):
        choose("heads", 4, 8192, False, small)  # JAX: no head-parallel schedule


CASES = [
    # world, layout, causal, q heads, kv heads, batch
    (1, "zigzag", True, 4, 2, 1),
    (2, "zigzag", True, 4, 2, 1),
    (3, "zigzag", True, 4, 1, 2),
    (4, "zigzag", True, 6, 3, 1),
    (5, "zigzag", True, 2, 2, 1),
    (4, "zigzag", False, 4, 2, 2),
    (3, "contiguous", True, 4, 2, 1),
    (4, "contiguous", False, 2, 2, 1),
]


@pytest.mark.parametrize("world,kind,causal,hq,hk,batch", CASES)
def test_gather_forward_backward_matches_exact_attention(world, kind, causal, hq, hk, batch):
    torch.manual_seed(world * 10 + hq + batch)
    n = 8 * world
    q, k, v = (torch.randn(batch, h, n, 16, dtype=torch.float32) for h in (hq, hk, hk))
    dout = torch.randn(batch, hq, n, 16)
    want, leaves = reference(q, k, v, causal)
    want.backward(dout.double())
    p = ring.Problem(causal, SCALE, kind, Dense("cpu"), gather=True)

    def rank(rg):
        mine = [layout.shard(t, world, rg.index, kind) for t in (q, k, v, dout)]
        out, lse, kept = gather.forward(rg, p, *mine[:3])
        halves = gs.gathered_halves(rg.index, world, kind, causal) if world > 1 else 0
        assert kept.numel() == halves * mine[1].numel()  # two halves per shard, k and v
        grads = gather.backward(rg, p, mine[3], *mine[:3], out, lse, kept)
        return out, grads

    sent: dict = {}
    assert_matches(run_ring(world, rank, sent), kind, want, leaves)
    # the backward returns gradients along the forward's pairs, reversed: one run per (tensor,
    # batch) per region gathered, and per block that read it
    fwd, bwd = sent.get("kv_gather", []), sent.get("dkv_scatter", [])
    assert {(b, a) for a, b in bwd} == set(fwd)
    assert len(fwd) == 2 * batch * len(gs.regions(world, kind, causal))
    n_back = sum(len(gs.contributions(o, world, kind, causal)) for o in range(world))
    assert len(bwd) == 2 * batch * n_back


def test_one_message_takes_the_credit_puts_and_raises_the_flag_last() -> None:
    """wire.put_runs / take_flag, which the ring's channels and the mailboxes share: the order
    of the stream operations a message is made of (a recording stand-in for the comm)."""
    from gshmem.attention.wire import put_runs, take_flag

    class Recorder:
        rank = 3

        def __init__(self):
            self.calls = []

        def __getattr__(self, name):
            return lambda *a, **k: self.calls.append((name, *a, k.get("stream")))

    c = Recorder()
    put_runs(c, "credit", [("d0", "b0"), ("d1", "b1")], "arrived", 5, stream=7)
    assert c.calls == [
        ("signal_wait_until", "credit", "eq", 1, 7),  # the receiver's slot is free
        ("signal_op", "credit", 0, 3, 7),  # taken (reset on this PE)
        ("put", "d0", "b0", 5, 7),
        ("put_signal", "d1", "b1", "arrived", 1, 5, 7),  # the flag travels with the last run
    ]
    c.calls.clear()  # a strided run (a slice of heads) is a 2-D put; the flag follows it
    rows = torch.zeros(2, 4, 3)[:, 1:3]
    put_runs(c, "credit", [("d0", "b0"), (rows, rows)], "arrived", 5, stream=7)
    assert [x[0] for x in c.calls] == ["signal_wait_until", "signal_op", "put", "put_2d",
                                       "signal_op"]  # fmt: skip
    assert c.calls[-1] == ("signal_op", "arrived", 1, 5, 7)
    c.calls.clear()
    take_flag(c, "arrived", 9)
    assert c.calls == [
        ("signal_wait_until", "arrived", "eq", 1, 9),
        ("signal_op", "arrived", 0, 3, 9),
    ]


@pytest.mark.parametrize("front,back", [(0, 0), (1, 0), (3, 1), (2, 2)])
def test_own_plus_slots_adds_each_halfs_slot_run(front, back):
    """The owner's key/value gradient: its own block's plus, over each half of the shard, that
    half's run of returned slots (sequence-major), against an fp64 sum."""
    from gshmem.attention.slot_sum import own_plus_slots

    g = torch.Generator().manual_seed(front * 7 + back)
    b, h, s, d, n = 2, 3, 10, 16, 4
    own = torch.randn(b, s, h, d, generator=g).transpose(1, 2)  # a strided, head-major view
    slots = torch.randn(n, b, s, h, d, generator=g)
    out = torch.full((b, h, s, d), float("nan"))
    own_plus_slots(own, slots, front, back, out)
    want = own.double().clone()
    for i in range(s):
        for j in range(front if i < s // 2 else back):
            want[:, :, i] += slots[j, :, i].double()
    torch.testing.assert_close(out.double(), want, rtol=1e-6, atol=1e-6)
