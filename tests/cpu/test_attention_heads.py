"""CPU tests of the head-parallel schedule (gshmem.attention.heads_schedule / heads): a shard's
runs are its positions, the heads split evenly, and the whole forward and backward run by W
threads over in-process mailboxes against exact attention, in both memory layouts."""

from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch")

from _ring_threads import run_ring  # noqa: E402
from test_attention_math import SCALE, assert_matches, reference  # noqa: E402

from gshmem import UsageError  # noqa: E402
from gshmem.attention import heads, layout, ring  # noqa: E402
from gshmem.attention import heads_schedule as hs  # noqa: E402
from gshmem.attention.local import Dense  # noqa: E402


@pytest.mark.parametrize("world", range(1, 9))
@pytest.mark.parametrize("kind", ["zigzag", "contiguous"])
def test_runs_are_the_shards_positions(world, kind):
    length = 6
    covered = []
    for r in range(world):
        pos = layout.token_index(length * world, world, r, kind)
        got = []
        for l0, g0, n in hs.runs(length, world, r, kind):
            assert l0 == len(got)  # in local order, back to back
            got += range(g0, g0 + n)
        assert got == list(pos)
        # zigzag: front and back halves, one run on the last rank (its chunks W-1 and W meet)
        want = 2 if kind == "zigzag" and r < world - 1 else 1
        assert len(hs.runs(length, world, r, kind)) == want
        covered += got
    assert sorted(covered) == list(range(length * world))


def test_head_ranges_split_evenly_and_uneven_heads_are_refused(monkeypatch):
    assert [hs.head_range(r, 4, 32) for r in range(4)] == [(0, 8), (8, 16), (16, 24), (24, 32)]
    assert [hs.head_range(1, 4, 32, c, 4) for c in range(4)] == [(8, 10), (10, 12), (12, 14),
                                                                  (14, 16)]  # fmt: skip
    monkeypatch.delenv("GSHMEM_ATTENTION_HEAD_CHUNKS", raising=False)
    assert [hs.chunk_count(w, 8) for w in (1, 2, 4, 8)] == [1, 1, 1, 1]  # measured best
    monkeypatch.setenv("GSHMEM_ATTENTION_HEAD_CHUNKS", "2")
    assert hs.chunk_count(2, 8) == 2
    for bad in ("3", "0", "x"):
        monkeypatch.setenv("GSHMEM_ATTENTION_HEAD_CHUNKS", bad)
        with pytest.raises(UsageError, match="GSHMEM_ATTENTION_HEAD_CHUNKS"):
            hs.chunk_count(2, 8)
    assert [hs.head_range(r, 4, 8) for r in range(4)] == [(0, 2), (2, 4), (4, 6), (6, 8)]
    hs.check_heads(8, 32, 8)
    with pytest.raises(UsageError, match="must both divide by 4"):
        hs.check_heads(4, 32, 2)
    with pytest.raises(UsageError, match="must both divide by 3"):
        hs.check_heads(3, 32, 8)


CASES = [
    # world, layout, causal, q heads, kv heads, batch, sequence-major, chunks
    (1, "zigzag", True, 4, 2, 1, False, 1),
    (2, "zigzag", True, 4, 2, 1, False, 1),
    (2, "zigzag", True, 8, 4, 2, True, 2),
    (3, "zigzag", True, 6, 3, 1, False, 1),
    (4, "zigzag", True, 16, 8, 2, True, 2),
    (4, "zigzag", False, 8, 8, 1, False, 2),
    (3, "contiguous", True, 6, 3, 2, False, 1),
    (2, "contiguous", False, 8, 8, 1, True, 4),
]


@pytest.mark.parametrize("world,kind,causal,hq,hk,batch,seq_major,chunks", CASES)
def test_heads_forward_backward_matches_exact_attention(world, kind, causal, hq, hk, batch,
                                                        seq_major, chunks):  # fmt: skip
    torch.manual_seed(world * 10 + hq + batch)
    n = 4 * world

    def make(h):
        t = torch.randn(batch, n, h, 16) if seq_major else torch.randn(batch, h, n, 16)
        return t.transpose(1, 2) if seq_major else t

    q, k, v, dout = make(hq), make(hk), make(hk), make(hq)
    want, leaves = reference(q, k, v, causal)
    want.backward(dout.double())
    p = ring.Problem(causal, SCALE, kind, Dense("cpu"), heads=True, seq_major=seq_major,
                     chunks=chunks)  # fmt: skip

    def rank(rg):
        mine = [layout.shard(t, world, rg.index, kind) for t in (q, k, v, dout)]
        if seq_major:  # shards stored as projections give them
            mine = [heads.in_layout(t, True) for t in mine]
            assert heads.is_seq_major(*mine)
        out, lse, kept, o = heads.forward(rg, p, *mine[:3])
        if world > 1:
            assert kept.numel() == mine[0].numel() + 2 * mine[1].numel()
            assert lse.shape == (batch, hq // world, n, 1) and o.shape == (
                batch,
                hq // world,
                n,
                16,
            )
        grads = heads.backward(rg, p, mine[3], *mine[:3], out, lse, kept, o)
        return out, grads

    sent: dict = {}
    assert_matches(run_ring(world, rank, sent), kind, want, leaves)
    # every rank sends each peer one piece per (tensor, batch, run of the tokens' owner): q,
    # k, v and dO to the heads' owners (runs of the writer), o, dq, dk, dv back (the reader's)
    runs = [len(hs.runs(n // world, world, r, kind)) for r in range(world)]
    for name, owner in (("heads_in", 0), ("heads_out", 1)):  # per chunk, in its mailboxes
        pairs = [x for c in range(chunks) for x in sent.get(f"{name}.{c}", [])]
        want = [pair for pair in itertools.permutations(range(world), 2)
                for _ in range(4 * batch * chunks * runs[pair[owner]])]  # fmt: skip
        assert sorted(pairs) == sorted(want)
