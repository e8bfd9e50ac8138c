"""CPU tests of gshmem.attention's math: layouts, the causal schedule against a brute-force mask,
the log-sum-exp merge against fp64, and the whole ring (forward and backward, every layout,
GQA, packed documents) run by W threads over in-process channels against exact attention."""

from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch")

from _ring_threads import run_ring  # noqa: E402

from gshmem import UsageError  # noqa: E402
from gshmem.attention import layout, merge, ring, schedule  # noqa: E402
from gshmem.attention.local import Dense, Varlen, math_forward  # noqa: E402


# -- layouts ---------------------------------------------------------------------------------
@pytest.mark.parametrize("world", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("kind", ["zigzag", "contiguous"])
def test_shard_unshard_round_trip(world, kind):
    x = torch.randn(2, 3, 16 * world, 5)
    shards = [layout.shard(x, world, r, kind) for r in range(world)]
    assert all(s.shape == (2, 3, 16, 5) for s in shards)
    assert torch.equal(layout.unshard(shards, kind), x)
    # every position once, and zigzag rank r holds chunks r and 2W-1-r
    idx = [layout.token_index(16 * world, world, r, kind) for r in range(world)]
    assert sorted(itertools.chain(*idx)) == list(range(16 * world))
    if kind == "zigzag":
        assert idx[0][:8] == list(range(8)) and idx[0][8:] == list(
            range(16 * world - 8, 16 * world)
        )


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_varlen_shard_unshard_round_trip(world):
    lengths = [2 * world * n for n in (3, 1, 5, 2)]
    cu = torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32)
    x = torch.randn(1, 2, int(cu[-1]), 4)
    shards = [layout.zigzag_shard(x, world, r, cu_seqlens=cu) for r in range(world)]
    assert torch.equal(layout.zigzag_unshard(shards, cu_seqlens=cu), x)
    # the last rank's front half starts with chunk W-1 of document 0, its back half with
    # chunk W of document 0 (3 tokens per chunk in document 0)
    idx = layout.token_index(int(cu[-1]), world, world - 1, cu_seqlens=cu)
    assert idx[:3] == list(range((world - 1) * 3, world * 3))
    assert idx[len(idx) // 2 : len(idx) // 2 + 3] == list(range(world * 3, (world + 1) * 3))


def test_layout_errors():
    with pytest.raises(UsageError, match="equal chunks"):
        layout.token_index(10, 2, 0, "zigzag")
    with pytest.raises(UsageError, match="layout must be"):
        layout.token_index(8, 2, 0, "ring")
    with pytest.raises(UsageError, match="multiple of 2 x 2"):
        layout.token_index(10, 2, 0, cu_seqlens=[0, 4, 10])
    with pytest.raises(UsageError, match="need layout='zigzag'"):
        layout.token_index(8, 2, 0, "contiguous", cu_seqlens=[0, 8])
    with pytest.raises(UsageError, match="covers 8 tokens"):
        layout.token_index(12, 2, 0, cu_seqlens=[0, 8])
    with pytest.raises(UsageError, match="outside a group"):
        layout.token_index(8, 2, 2)


# -- the schedule against a brute-force mask -------------------------------------------------
def covered(world, kind, causal, cu=None, split=False):
    """(query position, key position) -> times a block of the schedule covers it."""
    total = 4 * world if cu is None else int(cu[-1])
    pos = [layout.token_index(total, world, r, kind, cu) for r in range(world)]
    docs = None if cu is None else torch.bucketize(torch.arange(total), cu[1:], right=True)
    hits: dict[tuple[int, int], int] = {}
    for r, s in itertools.product(range(world), range(world)):
        src = schedule.source(r, world, s)
        for b in schedule.step_blocks(r, world, s, kind, causal, split):
            qa, qb = schedule.part_range(b.q, len(pos[r]))
            ka, kb = schedule.part_range(b.kv, len(pos[src]))
            qs, ks = pos[r][qa:qb], pos[src][ka:kb]
            for i, j in itertools.product(range(len(qs)), range(len(ks))):
                # what the kernels compute: a causal block masks by local order (top-left
                # aligned, equal lengths); a packed-document block stays inside documents
                same_doc = docs is None or docs[qs[i]] == docs[ks[j]]
                if same_doc and (not b.causal or j <= i):
                    hits[qs[i], ks[j]] = hits.get((qs[i], ks[j]), 0) + 1
    return hits, docs, total


@pytest.mark.parametrize("world", range(1, 9))
@pytest.mark.parametrize("kind", ["zigzag", "contiguous"])
@pytest.mark.parametrize("causal", [True, False])
def test_schedule_covers_the_mask_once(world, kind, causal):
    for split in (False, True) if kind == "zigzag" else (False,):
        hits, _, total = covered(world, kind, causal, split=split)
        want = {(i, j) for i in range(total) for j in range(total) if not causal or j <= i}
        assert set(hits) == want
        assert set(hits.values()) == {1}


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("causal", [True, False])
def test_varlen_schedule_covers_the_document_mask_once(world, causal):
    cu = torch.tensor([0, 2 * world, 8 * world, 10 * world], dtype=torch.int32)
    hits, docs, total = covered(world, "zigzag", causal, cu, split=True)
    want = {
        (i, j)
        for i in range(total)
        for j in range(total)
        if docs[i] == docs[j] and (not causal or j <= i)
    }
    assert set(hits) == want and set(hits.values()) == {1}


def test_zigzag_balances_causal_work():
    for world in range(2, 9):
        work = []
        for r in range(world):
            n = 0
            for s in range(world):
                for b in schedule.step_blocks(r, world, s, "zigzag", True):
                    q = 2 if b.q == "all" else 1
                    kv = 2 if b.kv == "all" else 1
                    n += q * kv * (0.5 if b.causal else 1)
            work.append(n)
        assert len(set(work)) == 1, work


# -- merge ---------------------------------------------------------------------------------
def test_merge_matches_fp64_softmax():
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 3, 7, 16, generator=g, dtype=torch.float64)
    k = torch.randn(2, 3, 20, 16, generator=g, dtype=torch.float64)
    v = torch.randn(2, 3, 20, 16, generator=g, dtype=torch.float64)
    whole, whole_lse = math_forward(q, k, v, False, 0.25)
    a, la = math_forward(q, k[:, :, :9], v[:, :, :9], False, 0.25)
    b, lb = math_forward(q, k[:, :, 9:], v[:, :, 9:], False, 0.25)
    acc, acc_lse = a.float().clone(), la.clone()
    merge.merge(acc, acc_lse, b, lb, acc, acc_lse)  # in place, fp32 destination
    assert torch.allclose(acc.double(), whole, atol=1e-6)
    assert torch.allclose(acc_lse.double(), whole_lse.double(), atol=1e-6)


def test_merge_of_empty_rows_is_not_nan():
    acc = torch.zeros(1, 1, 2, 4)
    acc_lse = torch.full((1, 1, 2, 1), -torch.inf)
    out = torch.randn(1, 1, 2, 4)
    lse = torch.tensor([-torch.inf, 0.5]).view(1, 1, 2, 1)
    merge.merge(acc, acc_lse, out, lse, acc, acc_lse)
    assert not acc.isnan().any()
    assert torch.equal(acc[0, 0, 0], torch.zeros(4)) and torch.allclose(acc[0, 0, 1], out[0, 0, 1])
    assert acc_lse[0, 0, 0, 0] == -torch.inf and acc_lse[0, 0, 1, 0] == 0.5


# -- the whole ring on threads (_ring_threads.py) ------------------------------------------------


# The softmax scale of the ring tests: not 16 ** -0.5, the default for their head dim, so that a
# kernel or ring step using the default instead of the given scale fails them.
SCALE = 0.1


def reference(q, k, v, causal, docs=None, scale=SCALE):
    """Exact attention with autograd on the full sequence ([b, h, s, d], fp64)."""
    q, k, v = (t.detach().double().requires_grad_() for t in (q, k, v))
    g = q.shape[1] // k.shape[1]
    s = q @ k.repeat_interleave(g, 1).transpose(-1, -2) * scale
    n = q.shape[2]
    allowed = torch.ones(n, n, dtype=torch.bool)
    if causal:
        allowed = allowed.tril()
    if docs is not None:
        allowed = allowed & (docs[:, None] == docs[None, :])
    out = torch.softmax(s.masked_fill(~allowed, -torch.inf), -1) @ v.repeat_interleave(g, 1)
    return out, (q, k, v)


CASES = [
    # world, layout, causal, q heads, kv heads
    (1, "zigzag", True, 4, 2),
    (2, "zigzag", True, 4, 2),
    (3, "zigzag", True, 4, 1),
    (4, "zigzag", True, 6, 3),
    (4, "zigzag", False, 4, 2),
    (3, "contiguous", True, 4, 2),
    (4, "contiguous", False, 2, 2),
]


@pytest.mark.parametrize("world,kind,causal,hq,hk", CASES)
def test_ring_forward_backward_matches_exact_attention(world, kind, causal, hq, hk):
    torch.manual_seed(world * 10 + hq)
    n = 8 * world
    q, k, v = (torch.randn(2, h, n, 16, dtype=torch.float32) for h in (hq, hk, hk))
    dout = torch.randn(2, hq, n, 16)
    want, leaves = reference(q, k, v, causal)
    want.backward(dout.double())
    p = ring.Problem(causal, SCALE, kind, Dense("cpu"))

    def rank(rg):
        r = rg.index
        mine = [layout.shard(t, world, r, kind) for t in (q, k, v, dout)]
        out, lse, last = ring.forward(rg, p, *mine[:3])
        grads = ring.backward(rg, p, mine[3], *mine[:3], out, lse, last)
        return out, grads

    assert_matches(run_ring(world, rank), kind, want, leaves)


def assert_matches(results, kind, want, leaves) -> None:
    """Every rank's (out, (dq, dk, dv)) put back together equals the exact output (2e-5) and
    gradients (5e-5)."""
    out = layout.unshard([r[0] for r in results], kind)
    assert torch.allclose(out.double(), want, atol=2e-5), (out.double() - want).abs().max()
    for i, leaf in enumerate(leaves):
        got = layout.unshard([r[1][i] for r in results], kind)
        assert torch.allclose(got.double(), leaf.grad, atol=5e-5), (
            i,
            (got - leaf.grad).abs().max(),
        )


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_ring_messages_leave_no_hop_after_the_last_attention(world):
    """Forward: K/V go right W - 1 times. Backward: the forward's last shard starts it, each
    rank ends on its own shard, so K/V go left W - 2 times and the dK/dV sums W - 1 times (no
    hop of finished sums after the last block)."""
    q, k, v = (torch.randn(1, 2, 4 * world, 8) for _ in range(3))
    p = ring.Problem(True, 0.5, "zigzag", Dense("cpu"))

    def rank(rg):
        mine = [layout.shard(t, world, rg.index, "zigzag") for t in (q, k, v, q)]
        out, lse, last = ring.forward(rg, p, *mine[:3])
        assert last.numel() == (0 if world == 1 else 2 * mine[1].numel())
        ring.backward(rg, p, mine[3], *mine[:3], out, lse, last)

    sent: dict = {}
    run_ring(world, rank, sent)
    right = sorted((r, (r + 1) % world) for r in range(world))
    left = sorted((r, (r - 1) % world) for r in range(world))
    assert sorted(sent["kv"]) == sorted(right * (world - 1))
    assert sorted(sent["kv_back"]) == sorted(left * max(world - 2, 0))
    assert sorted(sent["dkv"]) == sorted(left * (world - 1))


@pytest.mark.parametrize("world", [1, 2, 3])
@pytest.mark.parametrize("causal", [True, False])
def test_ring_varlen_matches_document_masked_attention(world, causal):
    torch.manual_seed(7 + world)
    cu = torch.tensor([0, 2 * world, 8 * world, 12 * world], dtype=torch.int32)
    n = int(cu[-1])
    docs = torch.bucketize(torch.arange(n), cu[1:], right=True)
    q, k, v = (torch.randn(1, h, n, 16) for h in (4, 2, 2))
    dout = torch.randn(1, 4, n, 16)
    want, leaves = reference(q, k, v, causal, docs)
    want.backward(dout.double())
    part = cu // (2 * world)
    kernel = Varlen("cpu", part, int((part[1:] - part[:-1]).max()))
    p = ring.Problem(causal, SCALE, "zigzag", kernel, split=True)

    def thd(t):
        return t[0].transpose(0, 1).contiguous()

    def rank(rg):
        mine = [
            thd(layout.zigzag_shard(t, world, rg.index, cu_seqlens=cu)) for t in (q, k, v, dout)
        ]
        out, lse, last = ring.forward(rg, p, *mine[:3])
        grads = ring.backward(rg, p, mine[3], *mine[:3], out, lse, last)
        return [t.transpose(0, 1).unsqueeze(0) for t in (out, *grads)]

    results = run_ring(world, rank)
    got = [layout.zigzag_unshard([r[i] for r in results], cu_seqlens=cu) for i in range(4)]
    assert torch.allclose(got[0].double(), want, atol=2e-5)
    for i, leaf in enumerate(leaves):
        assert torch.allclose(got[i + 1].double(), leaf.grad, atol=5e-5), i
