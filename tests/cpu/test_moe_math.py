"""MoE dispatch/combine math on the CPU: the sender's plan and the receiver's rows per expert
against brute-force references, and the whole dispatch -> experts -> combine over W simulated
ranks (the kernels' writes and reads emulated row by row) against a dense MoE layer."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gshmem import UsageError  # noqa: E402
from gshmem.moe import arrange, routing  # noqa: E402


def random_routing(tokens, k, experts, seed, none=0.1):
    g = torch.Generator().manual_seed(seed)
    rows = [torch.randperm(experts, generator=g)[:k] for _ in range(tokens)]
    idx = torch.stack(rows) if rows else torch.zeros((0, k), dtype=torch.long)
    idx[torch.rand(idx.shape, generator=g) < none] = -1
    weights = torch.rand(idx.shape, generator=g)
    return idx, weights


def test_plan_matches_brute_force():
    world, experts, k = 4, 16, 4
    idx, _ = random_routing(37, k, experts, 0)
    p = routing.plan(idx, experts, world)
    per = experts // world
    seen = [0] * world
    for t in range(idx.shape[0]):
        ranks = {int(e) // per for e in idx[t] if e >= 0}
        for r in range(world):
            assert bool(p.to_rank[t, r]) == (r in ranks)
            assert int(p.position[t, r]) == (seen[r] if r in ranks else -1)
            seen[r] += r in ranks
    assert p.counts[:world].tolist() == seen
    want = [int((idx == e).sum()) for e in range(experts)]
    assert p.counts[world:].tolist() == [*want, 0]


def test_plan_sends_a_token_once_per_rank():
    """Two experts of one rank (and an expert repeated): the token travels to it once."""
    idx = torch.tensor([[0, 1, 1, 5]])  # experts 0, 1 on rank 0; 5 on rank 1 (4 per rank)
    p = routing.plan(idx, 8, 2)
    assert p.to_rank.tolist() == [[True, True]]
    assert p.counts[:2].tolist() == [1, 1]
    assert p.counts[2:].tolist() == [1, 2, 0, 0, 0, 1, 0, 0, 0]


def test_offsets_and_received_place_senders_in_rank_order():
    counts = torch.tensor([[3, 1, 0], [2, 0, 4], [1, 5, 2]], dtype=torch.int32)  # [src, dst]
    full = torch.cat([counts, torch.zeros(3, 4, dtype=torch.int32)], 1)
    assert routing.offsets(full, 2, 3).tolist() == [5, 1, 4]  # after senders 0 and 1
    assert routing.received(full, 1, 3).tolist() == [0, 1, 1, 6]


@pytest.mark.parametrize("world,experts,k", [(1, 4, 2), (2, 8, 4), (3, 6, 6), (4, 16, 8)])
def test_expert_slots_are_expert_major_then_by_sender_token_choice(world, experts, k):
    """Every sender's slots at every receiver: a permutation of the receiver's pairs, in the order
    (local expert, source rank, token, choice), with a rank without tokens and repeated experts."""
    per = experts // world
    idxs = [random_routing(0 if s == world - 1 and world > 1 else 23 + s, k, experts, s)[0]
            for s in range(world)]  # fmt: skip
    idxs[0][0, :2] = 0  # one expert chosen twice by a token: two pairs
    all_counts = torch.stack([routing.plan(i, experts, world).counts for i in idxs])
    got = {r: {} for r in range(world)}
    for s, idx in enumerate(idxs):
        slots = routing.expert_slots(all_counts, s, idx, experts, world)
        for t in range(idx.shape[0]):
            for j in range(k):
                e = int(idx[t, j])
                assert (int(slots[t, j]) < 0) == (e < 0)
                if e >= 0:
                    assert int(slots[t, j]) not in got[e // per]  # no slot twice
                    got[e // per][int(slots[t, j])] = (e % per, s, t, j)
    for r in range(world):
        routed = sum(int(((i >= 0) & (i // per == r)).sum()) for i in idxs)
        assert len(got[r]) == routed  # every pair routed to r has a slot there
        want = sorted(got[r].values())
        assert sorted(got[r]) == list(range(len(want)))  # slots 0 .. n - 1, none skipped
        assert [got[r][i] for i in range(len(want))] == want


def test_reduce_rows_sums_in_fp32_and_rounds_once():
    """bf16 rows: summed in fp32, rounded to bf16 once (a bf16 running sum loses the small
    terms); unweighted, the weights are not applied."""
    local = torch.tensor([[0, 1, 2, 3]], dtype=torch.int32)  # one row, four pairs
    ones = torch.ones(1, 4)
    y = torch.tensor([[1.0], [2**-8], [2**-8], [2**-8]], dtype=torch.bfloat16)
    want = torch.tensor([[1 + 3 * 2**-8]]).bfloat16()  # 1.01171875 -> 1.015625
    running = y[0]
    for v in y[1:]:
        running = running + v
    assert not torch.equal(running, want[0])  # bf16 accumulation gives 1.0
    got = arrange.reduce_rows(y, arrange.pairs(local, ones, 4, 4))
    assert got.dtype == torch.bfloat16 and torch.equal(got, want)
    halves = arrange.pairs(local, ones * 0.5, 4, 4)
    assert torch.equal(arrange.reduce_rows(y, halves), (want.float() * 0.5).bfloat16())
    assert torch.equal(arrange.reduce_rows(y, halves, weighted=False), want)


def test_pairs_are_expert_major_and_slots_invert_them():
    local = torch.tensor([[1, -1, 0], [0, 2, -1], [-1, -1, 1], [2, 0, 1]], dtype=torch.int32)
    weights = torch.arange(12, dtype=torch.float32).view(4, 3)
    p = arrange.pairs(local, weights, 3, int((local >= 0).sum()))
    assert p.per_expert.tolist() == [3, 3, 2]
    assert p.row.tolist() == [0, 1, 3, 0, 2, 3, 1, 3]  # expert 0, 1, 2; rows in order within
    for i, (r, w) in enumerate(zip(p.row.tolist(), p.weight.tolist(), strict=True)):
        c = p.slot[r].tolist().index(i)
        assert w == weights[r, c] and int(local[r, c]) >= 0
    assert int((p.slot >= 0).sum()) == 8


def test_worst_rows_bound_the_pairs_a_rank_can_receive():
    from gshmem.moe.context import Context

    def context(world: int, experts: int) -> Context:  # hidden 8, max_tokens 10: no comm needed
        return Context(None, None, world, 0, 8, 10, experts,  # type: ignore[arg-type]
                       torch.bfloat16, 1, None, b"")  # fmt: skip

    ctx = context(4, 16)
    assert ctx.most_pairs() == 10 * 4 * 4  # every token of 4 ranks to each of 4 local experts
    ctx.worst_rows_ok(0)
    ctx.worst_rows_ok(160)
    for bad in (161, -1):
        with pytest.raises(UsageError, match=rf"num_worst_rows={bad} is outside \[0, 160\]"):
            ctx.worst_rows_ok(bad)
    for bad in (3.0, True, "8"):
        with pytest.raises(UsageError, match="num_worst_rows must be an int"):
            ctx.worst_rows_ok(bad)  # type: ignore[arg-type]
    wide = context(2, 64)
    assert wide.most_pairs() == 10 * 2 * 8  # 32 local experts, top-8 at most


def test_checks_name_the_problem():
    idx, w = random_routing(4, 2, 8, 1)
    with pytest.raises(UsageError, match="top-k"):
        routing.check(torch.zeros(4, 9, dtype=torch.long), torch.zeros(4, 9), 16, 2)
    with pytest.raises(UsageError, match="larger than the number of experts"):
        routing.check(idx, w, 1, 1)
    with pytest.raises(UsageError, match="split evenly"):
        routing.check(idx, w, 9, 2)
    with pytest.raises(UsageError, match="float32"):
        routing.check(idx, w.double(), 8, 2)
    with pytest.raises(UsageError, match="int64 or int32"):
        routing.check(idx.float(), w, 8, 2)
    bad = routing.plan(torch.tensor([[0, 8], [-2, 3]]), 8, 2)  # out of range: routed nowhere
    assert bad.counts.tolist() == [2, 0, 1, 0, 0, 1, 0, 0, 0, 0, 2]
    good = routing.plan(idx, 8, 2)
    routing.check_counts(torch.stack([good.counts, good.counts]), 8)
    with pytest.raises(UsageError, match=r"rank\(s\) \[1\]"):
        routing.check_counts(torch.stack([good.counts, bad.counts]), 8)


class SimRanks:
    """W ranks' dispatch and combine with the kernels' writes and reads done row by row."""

    def __init__(self, world, experts, hidden, k):
        self.world, self.experts, self.hidden, self.k = world, experts, hidden, k
        self.per = experts // world

    def dispatch(self, xs, idxs, weights):
        w, per = self.world, self.per
        plans = [routing.plan(i, self.experts, w) for i in idxs]
        counts = torch.stack([p.counts for p in plans])  # the all-gather
        rows = [int(routing.received(counts, r, w)[-1]) for r in range(w)]
        recv_x = [torch.full((n, self.hidden), float("nan"), dtype=xs[0].dtype) for n in rows]
        local = [torch.full((n, self.k), 99, dtype=torch.int32) for n in rows]
        recv_w = [torch.full((n, self.k), float("nan")) for n in rows]
        src = [torch.full((n,), -1) for n in rows]
        for s in range(w):  # the dispatch kernel of sender s
            off = routing.offsets(counts, s, w)
            for t in range(xs[s].shape[0]):
                for r in range(w):
                    pos = int(plans[s].position[t, r])
                    if pos < 0:
                        continue
                    row = int(off[r]) + pos
                    recv_x[r][row] = xs[s][t]
                    src[r][row] = t
                    for c in range(self.k):
                        e = int(idxs[s][t, c])
                        here = e >= 0 and e // per == r
                        local[r][row, c] = e % per if here else -1
                        recv_w[r][row, c] = weights[s][t, c] if here else 0.0
        out = []
        for r in range(w):
            npairs = int(routing.pairs_per_expert(counts, r, w, self.experts).sum())
            p = arrange.pairs(local[r], recv_w[r], per, npairs)
            out.append((recv_x[r][p.row], p, src[r]))
        return plans, counts, out

    def combine(self, plans, counts, ys, pairs):
        w = self.world
        comb = [arrange.reduce_rows(y, p) for y, p in zip(ys, pairs, strict=True)]  # reduce
        outs = []
        for s in range(w):  # the pull kernel of sender s
            off = routing.offsets(counts, s, w)
            tokens = plans[s].position.shape[0]
            acc = torch.zeros(tokens, self.hidden, dtype=torch.float64)
            for t in range(tokens):
                for r in range(w):
                    pos = int(plans[s].position[t, r])
                    if pos >= 0:
                        acc[t] += comb[r][int(off[r]) + pos].double()
            outs.append(acc)
        return outs


@pytest.mark.parametrize("world,experts,k", [(1, 4, 2), (2, 8, 2), (4, 16, 8), (3, 6, 3)])
def test_dispatch_experts_combine_equals_a_dense_moe_layer(world, experts, k):
    torch.manual_seed(world * 100 + k)
    hidden, tokens = 8, [5, 0, 7, 3][:world]
    sim = SimRanks(world, experts, hidden, k)
    xs = [torch.randn(n, hidden, dtype=torch.float64) for n in tokens]
    routes = [random_routing(n, k, experts, 10 + i, none=0.2) for i, n in enumerate(tokens)]
    if world > 1:  # every token of rank 0 to expert 0: one crowded expert, many empty ones
        routes[0][0][:, 0] = 0
    idxs, weights = [r[0] for r in routes], [r[1].double() for r in routes]
    scale = torch.randn(experts, dtype=torch.float64)  # expert e: x -> tanh(x) * scale[e]
    plans, counts, got = sim.dispatch(xs, idxs, weights)
    ys = []
    for r, (rx, p, _src) in enumerate(got):
        assert not torch.isnan(rx).any()
        assert sum(p.per_expert.tolist()) == rx.shape[0]
        experts_of_r = range(r * sim.per, (r + 1) * sim.per)
        brute = [sum(int((i == e).sum()) for i in idxs) for e in experts_of_r]
        assert routing.pairs_per_expert(counts, r, world, experts).tolist() == brute
        e = torch.repeat_interleave(torch.arange(sim.per) + r * sim.per, p.per_expert)
        ys.append(torch.tanh(rx) * scale[e][:, None])
    outs = sim.combine(plans, counts, ys, [g[1] for g in got])
    for s in range(world):
        want = torch.zeros(tokens[s], hidden, dtype=torch.float64)
        for t in range(tokens[s]):
            for c in range(k):
                e = int(idxs[s][t, c])
                if e >= 0:
                    want[t] += weights[s][t, c] * torch.tanh(xs[s][t]) * scale[e]
        assert torch.allclose(outs[s], want, rtol=0, atol=1e-12), (outs[s] - want).abs().max()
