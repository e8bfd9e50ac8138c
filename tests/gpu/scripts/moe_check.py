"""GPU checks of gshmem.moe.Buffer, run as one rank of `python -m gshmem.run -n N`.

Usage: moe_check.py SCENARIO
  values   dispatch: every rank's received rows, weights and sources against what every rank's
           routing says (each rank regenerates every rank's inputs); combine: the weighted sum of
           simple experts (row x scale[e]) against an fp32 reference. Routings: random with
           unrouted entries, every token to expert 0 (other experts empty), top-8 over few ranks
           (several experts of one rank per token), a rank with no tokens. Several calls in a row.
  grad     autograd through dispatch -> experts -> combine against the same layer in fp32: the
           gradients of x and of the router weights (when every rank's need one, when only
           rank 0's do, when none do)
  fp8      use_fp8=True: every received row's scales and e4m3 values against the token it came
           from (groups of magnitudes 10^-3..10^3), the combine of dequantized experts within
           the summed bound
  badargs  clear UsageErrors: dtype, shapes, too many tokens, expert index out of range (on
           one rank: every rank raises), calls out of order, num_worst_rows out of range
  worst    dispatch with num_worst_rows (no host synchronisation): against the synchronised
           dispatch of the same inputs, its rows, weights and sources, padded (weights 0,
           sources -1) up to a tight and a loose bound; the combine's output and the gradients
           of x and of the router weights equal the synchronised ones
  tokens   token_rows=True: each pair's row of x (the receive buffer, one row per sender's
           token) is the token it came from, x has one row per (sender, token) received, bf16
           and FP8, with and without num_worst_rows; the combine of outputs computed on the
           gathered rows against the fp32 reference, per pair and per token row
           (reduce_pairs against arrange.reduce_rows, then combine(token_rows=True) of its
           result, and of a copy of it); what needs a gradient is refused, as are wrong shapes
           and a stale handle
  overflow (run alone: it stops the kernels) a bound below what a rank receives traps with a
           message naming the count and the bound
Prints "PASS <scenario>" on success; any failure raises (non-zero exit).
"""

from __future__ import annotations

import itertools
import sys

import torch
from expect import expect_usage

import gshmem
from gshmem.moe import Buffer, arrange

HIDDEN = 256


def inputs(rank: int, tokens: int, k: int, experts: int, kind: str, seed: int,
           hidden: int = HIDDEN):  # fmt: skip
    """Rank ``rank``'s x, topk_idx, topk_weights (the same on every rank that asks)."""
    g = torch.Generator(device="cuda").manual_seed(seed * 100 + rank)
    x = torch.randn(tokens, hidden, generator=g, device="cuda").to(torch.bfloat16)
    scores = torch.rand(tokens, experts, generator=g, device="cuda")
    idx = scores.topk(k, dim=1).indices
    if kind == "random":
        idx[torch.rand(idx.shape, generator=g, device="cuda") < 0.15] = -1
    elif kind == "one_expert":
        idx[:, 0] = 0
        idx[:, 1:] = -1
    weights = torch.rand(idx.shape, generator=g, device="cuda")
    return x, idx, weights


def scales(experts: int) -> torch.Tensor:
    return torch.linspace(0.5, 2.0, experts, device="cuda")


def expected_received(me: int, world: int, per: int, all_inputs):
    """(rows of x, weights, src rank, src token) in the order a dispatch returns them."""
    pairs = []  # (local expert, src rank, src token, choice)
    for s, (_, idx, _) in enumerate(all_inputs):
        for t, row in enumerate(idx.tolist()):
            for c, e in enumerate(row):
                if e >= 0 and e // per == me:
                    pairs.append((e % per, s, t, c))
    pairs.sort()
    xs = [all_inputs[s][0][t] for _, s, t, _ in pairs]
    ws = [float(all_inputs[s][2][t, c]) for _, s, t, c in pairs]
    empty = torch.zeros(0, HIDDEN, dtype=torch.bfloat16, device="cuda")
    return (torch.stack(xs) if xs else empty, ws, [p[1] for p in pairs], [p[2] for p in pairs],
            [sum(1 for p in pairs if p[0] == e) for e in range(per)])  # fmt: skip


def pair_experts(me: int, per: int, per_expert: list[int]) -> torch.Tensor:
    """The expert of each received pair, pairs in expert order."""
    counts = torch.tensor(per_expert, device="cuda")
    return torch.repeat_interleave(torch.arange(per, device="cuda") + me * per, counts)


def experts_of(d, me: int, per: int, experts: int) -> torch.Tensor:
    return scales(experts)[pair_experts(me, per, d.tokens_per_expert)]


def reference_combine(x, idx, weights, experts: int) -> torch.Tensor:
    """sum_c w[t,c] * bf16(x[t] * scale[e]) in fp32 (the experts' outputs are bf16)."""
    out = torch.zeros(x.shape, dtype=torch.float32, device="cuda")
    s = scales(experts)
    for c in range(idx.shape[1]):
        e = idx[:, c]
        y = (x.float() * s[e.clamp(min=0)][:, None]).to(torch.bfloat16).float()
        out += torch.where(e[:, None] >= 0, weights[:, c : c + 1] * y, 0.0)
    return out


def close(got, want, tol: float, what: str) -> None:
    """``got`` within ``tol`` of ``want``'s largest magnitude (at least 1)."""
    if got.numel():
        err = (got - want).abs().max().item()
        assert err <= tol * max(want.abs().max().item(), 1.0), (what, err)


def fp8_inputs(rank: int, tokens: int, k: int, experts: int, seed: int, hidden: int = HIDDEN):
    """inputs(), with each 128-element group of a token scaled by 10^U(-3, 3)."""
    x, idx, w = inputs(rank, tokens, k, experts, "random", seed, hidden)
    g = torch.Generator(device="cuda").manual_seed(seed * 100 + rank + 7)
    mag = 10 ** (6 * torch.rand(tokens, hidden // 128, 1, generator=g, device="cuda") - 3)
    x = (x.float().view(tokens, -1, 128) * mag).view(tokens, hidden).to(torch.bfloat16)
    return x, idx, w


def check_fp8_rows(values, row_scales, sent) -> None:
    """e4m3 rows and their scales against the bf16 rows ``sent``: every group's scale is its
    largest magnitude / 448, every value within e4m3's rounding (2^-4 relative, plus
    scale x 2^-10 near zero)."""
    n = sent.shape[0]
    groups = sent.float().view(n, -1, 128)
    assert torch.allclose(row_scales, groups.abs().amax(-1) / 448, rtol=1e-6, atol=0)
    deq = values.float().view(n, -1, 128) * row_scales[..., None]
    bound = groups.abs() * 2**-4 + row_scales[..., None] * 2**-10
    assert ((deq - groups).abs() <= bound * (1 + 1e-6)).all(), "an e4m3 value off its rounding"


def check_fp8_combine(out, x, idx, w, experts: int) -> None:
    """The combine of dequantized rows against the fp32 reference: each term within e4m3's
    rounding, plus bf16's rounding of each expert output and of the sum."""
    ref = reference_combine(x, idx, w, experts)
    group_scale = x.float().view(x.shape[0], -1, 128).abs().amax(-1) / 448
    per_token = x.float().abs() * 2**-4 + group_scale.repeat_interleave(128, -1) * 2**-10
    s = scales(experts)
    wsum = torch.where(idx >= 0, w * s[idx.clamp(min=0)], 0.0).sum(1, keepdim=True)
    bound = wsum * (per_token * 1.01 + 2**-7 * x.float().abs()) + 2**-8 * ref.abs() + 1e-30
    assert ((out.float() - ref).abs() <= bound).all(), "fp8 combine outside its bound"


CASES = [  # (tokens per rank, k, experts per rank, kind)
    (300, 4, 4, "random"),
    (200, 8, 2, "topk"),  # top-8 over 2 experts per rank: several experts of one rank
    (129, 2, 3, "one_expert"),
]


def values(comm) -> None:
    world, me = comm.nranks, comm.rank
    for seed, (tokens, k, per, kind) in enumerate(CASES * 2):  # each twice: counters move on
        experts = per * world
        k = min(k, experts)
        counts = [tokens if r != world - 1 or world == 1 else 0 for r in range(world)]  # last: none
        buf = Buffer(comm, HIDDEN, max(tokens, 1), experts)
        for call in range(2):
            everyone = [
                inputs(r, counts[r], k, experts, kind, seed * 7 + call) for r in range(world)
            ]
            x, idx, w = everyone[me]
            d = buf.dispatch(x, idx, w)
            want_x, want_w, want_src, want_tok, want_per = expected_received(
                me, world, per, everyone
            )
            assert d.tokens_per_expert == want_per, (d.tokens_per_expert, want_per)
            assert torch.equal(d.x, want_x), "received rows differ"
            assert d.weights.tolist() == want_w
            assert d.src_rank.tolist() == want_src and d.src_token.tolist() == want_tok
            y = (d.x.float() * experts_of(d, me, per, experts)[:, None]).to(torch.bfloat16)
            out = buf.combine(y, d.handle)
            ref = reference_combine(x, idx, w, experts)
            close(out.float(), ref, 2e-2, kind)
        del buf


def grad(comm) -> None:
    world, me = comm.nranks, comm.rank
    per, k, tokens = 4, 4, 256
    experts = per * world
    buf = Buffer(comm, HIDDEN, tokens, experts)
    s = scales(experts)
    # step 0: every rank's router weights need a gradient; step 1: only rank 0's (the others'
    # must still return their dots); step 2: nobody's
    for step in range(3):
        x, idx, w = inputs(me, tokens, k, experts, "random", 50 + step)
        g = torch.randn(tokens, HIDDEN, device="cuda")
        xr = x.detach().requires_grad_()
        wr = w.detach().requires_grad_(step == 0 or (step == 1 and me == 0))
        d = buf.dispatch(xr, idx, wr)
        y = d.x * experts_of(d, me, per, experts)[:, None].to(torch.bfloat16)
        (buf.combine(y, d.handle).float() * g).sum().backward()
        # reference: d out[t] / d x[t] = sum_c w[t,c] scale[e] (elementwise experts)
        factor = torch.where(idx >= 0, w * s[idx.clamp(min=0)], 0.0).sum(1)
        want = g * factor[:, None]
        err = (xr.grad.float() - want).abs().max().item()
        assert err <= 3e-2 * want.abs().max().item(), err
        if not wr.requires_grad:
            assert wr.grad is None
            continue
        # d out[t] / d w[t,c] = the expert's row: bf16(x[t] * scale[e]), dotted with g[t]
        rows = (x.float()[:, None, :] * s[idx.clamp(min=0)][..., None]).to(torch.bfloat16)
        terms = g[:, None, :] * rows.float()
        want_w = torch.where(idx >= 0, terms.sum(-1), 0.0)
        bound = 1e-2 * terms.abs().sum(-1) + 1e-6
        assert ((wr.grad - want_w).abs() <= bound).all(), (wr.grad - want_w).abs().max()


def fp8(comm) -> None:
    world, me = comm.nranks, comm.rank
    per, k, tokens = 3, min(4, 3 * world), 200
    experts = per * world
    buf = Buffer(comm, HIDDEN, tokens, experts)
    for call in range(2):
        everyone = [fp8_inputs(r, tokens, k, experts, 60 + call) for r in range(world)]
        x, idx, w = everyone[me]
        d = buf.dispatch(x, idx, w, use_fp8=True)
        want_x, want_w, want_src, want_tok, want_per = expected_received(me, world, per, everyone)
        assert d.tokens_per_expert == want_per and d.weights.tolist() == want_w
        assert d.src_rank.tolist() == want_src and d.src_token.tolist() == want_tok
        assert d.x.dtype == torch.float8_e4m3fn and d.scales.shape == (len(want_w), HIDDEN // 128)
        if want_w:
            check_fp8_rows(d.x, d.scales, want_x)
        deq = d.x.float() * d.scales.repeat_interleave(128, dim=-1)
        y = (deq * experts_of(d, me, per, experts)[:, None]).to(torch.bfloat16)
        check_fp8_combine(buf.combine(y, d.handle), x, idx, w, experts)


def each_case(comm, seed: int):
    """Per entry of CASES: (tokens, experts per rank, experts, a buffer, every rank's inputs,
    what this rank receives of them)."""
    world, me = comm.nranks, comm.rank
    for i, (tokens, k, per, kind) in enumerate(CASES):
        experts = per * world
        k = min(k, experts)
        buf = Buffer(comm, HIDDEN, tokens, experts)
        everyone = [inputs(r, tokens, k, experts, kind, seed + i) for r in range(world)]
        yield tokens, per, experts, buf, everyone, expected_received(me, world, per, everyone)


def worst(comm) -> None:
    me = comm.rank
    for tokens, per, experts, buf, everyone, want in each_case(comm, 80):
        x, idx, w = everyone[me]
        want_x, want_w, want_src, want_tok, want_per = want
        n = len(want_w)
        g = torch.randn(tokens, HIDDEN, device="cuda")
        results = []
        for bound in (None, min(n + 5, buf.ctx.most_pairs()), buf.ctx.most_pairs()):
            xr = x.detach().requires_grad_()
            wr = w.detach().requires_grad_()
            d = buf.dispatch(xr, idx, wr, num_worst_rows=bound)
            if bound is None:
                assert d.tokens_per_expert == want_per
            else:
                assert d.x.shape[0] == d.weights.shape[0] == d.src_rank.shape[0] == bound
                assert torch.is_tensor(d.tokens_per_expert)
                assert d.tokens_per_expert.tolist() == want_per
                assert (d.weights[n:] == 0).all() and (d.src_rank[n:] == -1).all()
                assert (d.src_token[n:] < 0).all()
            assert torch.equal(d.x[:n], want_x), "received rows differ"
            assert d.weights[:n].tolist() == want_w
            assert d.src_rank[:n].tolist() == want_src and d.src_token[:n].tolist() == want_tok
            factor = torch.ones(d.x.shape[0], device="cuda")  # padding rows: any experts' output
            factor[:n] = scales(experts)[pair_experts(me, per, want_per)]
            y = d.x * factor[:, None].to(torch.bfloat16)
            out = buf.combine(y, d.handle)
            (out.float() * g).sum().backward()
            results.append((out, xr.grad, wr.grad))
        for out, gx, gw in results[1:]:  # the same bits as the synchronised dispatch
            assert torch.equal(out, results[0][0]), "combine differs without the sync"
            assert torch.equal(gx, results[0][1]) and torch.equal(gw, results[0][2])


def rows_here(me: int, per: int, everyone) -> int:
    """The (sender, token) rows with a choice on this rank."""
    return sum(int(((i >= 0) & (i // per == me)).any(1).sum()) for _, i, _ in everyone)


def tokens(comm) -> None:
    world, me = comm.nranks, comm.rank
    for tokens, per, experts, buf, everyone, want in each_case(comm, 90):
        x, idx, w = everyone[me]
        want_x, want_w, want_src, want_tok, want_per = want
        n, rows = len(want_w), rows_here(me, per, everyone)
        ref = reference_combine(x, idx, w, experts)
        for bound, by_rows in itertools.product((None, buf.ctx.most_pairs()), (False, True)):
            d = buf.dispatch(x, idx, w, num_worst_rows=bound, token_rows=True)
            assert d.x.shape[0] == (rows if bound is None else min(bound, tokens * world))
            assert d.row.shape == d.weights.shape and d.scales is None
            assert torch.equal(d.x[d.row[:n]], want_x), "pairs' rows differ"
            assert d.weights[:n].tolist() == want_w
            assert d.src_rank[:n].tolist() == want_src and d.src_token[:n].tolist() == want_tok
            factor = torch.ones(d.row.shape[0], device="cuda")  # padding pairs: any output
            factor[:n] = scales(experts)[pair_experts(me, per, want_per)]
            y = (d.x[d.row].float() * factor[:, None]).to(torch.bfloat16)
            if by_rows:  # each row's weighted sum here, then one row per (token, rank) back
                summed = buf.reduce_pairs(y, d.handle)
                assert summed.shape == d.x.shape
                pairs = arrange.Pairs(d.row[:n], d.weights[:n], d.handle.pairs.per_expert,
                                      d.handle.pairs.slot)  # fmt: skip
                want_sums = arrange.reduce_rows(y[:n], pairs)[:rows].float()
                close(summed[:rows].float(), want_sums, 1e-2, "reduce_pairs")
                if bound is None:  # not the buffer's own rows: copied (pull) or pushed from here
                    summed = summed.clone()
                out = buf.combine(summed, d.handle, token_rows=True)
            else:
                out = buf.combine(y, d.handle)
            close(out.float(), ref, 2e-2, f"combine {tokens} {bound} {by_rows}")
        k = idx.shape[1]
        x8 = [fp8_inputs(r, tokens, k, experts, 95 + tokens) for r in range(world)]
        d = buf.dispatch(*x8[me], use_fp8=True, token_rows=True)
        sent, _, _, _, per8 = expected_received(me, world, per, x8)
        shape = (rows_here(me, per, x8), HIDDEN // 128)
        assert d.x.dtype == torch.float8_e4m3fn and d.scales.shape == shape
        if sent.shape[0]:
            check_fp8_rows(d.x[d.row], d.scales[d.row], sent)
        deq = d.x[d.row].float() * d.scales[d.row].repeat_interleave(128, dim=-1)
        y = (deq * scales(experts)[pair_experts(me, per, per8)][:, None]).to(torch.bfloat16)
        check_fp8_combine(buf.combine(y, d.handle), *x8[me], experts)
    buf = Buffer(comm, HIDDEN, 8, 2 * world)
    x, idx, w = inputs(me, 8, 2, 2 * world, "random", 99)
    expect_usage(lambda: buf.dispatch(x.requires_grad_(), idx, w, token_rows=True),
                 "not differentiable")  # fmt: skip
    d = buf.dispatch(x.detach(), idx, w, token_rows=True)
    y = d.x[d.row].requires_grad_()
    expect_usage(lambda: buf.reduce_pairs(y, d.handle), "not differentiable")
    rows_y = d.x.clone().requires_grad_()
    expect_usage(lambda: buf.combine(rows_y, d.handle, token_rows=True), "not differentiable")
    half = d.x[:, : HIDDEN // 2]
    expect_usage(lambda: buf.combine(half, d.handle, token_rows=True), "must be")
    buf.combine(rows_y.detach(), d.handle, token_rows=True)  # the calls alternate as before
    expect_usage(lambda: buf.reduce_pairs(y.detach(), d.handle), "alternate")


def overflow(comm) -> None:
    world, me = comm.nranks, comm.rank
    experts = 2 * world
    buf = Buffer(comm, HIDDEN, 64, experts)
    x, idx, w = inputs(me, 64, 2, experts, "random", 9)
    d = buf.dispatch(x, idx, w, num_worst_rows=3)  # every rank receives more than 3 rows
    buf.combine(d.x, d.handle)
    torch.cuda.synchronize()  # the check traps here (every rank: each receives more)


def badargs(comm) -> None:
    world, me = comm.nranks, comm.rank
    experts = 2 * world
    buf = Buffer(comm, HIDDEN, 64, experts)
    x, idx, w = inputs(me, 64, 2, experts, "random", 3)
    expect_usage(lambda: buf.dispatch(x.half(), idx, w), "bfloat16")
    expect_usage(lambda: buf.dispatch(x[:, :128], idx, w), f"[tokens, {HIDDEN}]")
    expect_usage(lambda: buf.dispatch(torch.cat([x, x]), torch.cat([idx, idx]),
                                      torch.cat([w, w])), "exceed")  # fmt: skip
    expect_usage(lambda: buf.dispatch(x, idx, w.double()), "float32")
    expect_usage(lambda: buf.dispatch(x, idx[:, :1].expand(-1, experts + 1), w), "top-k")
    bad = idx.clone()
    if me == 0:
        bad[5, 0] = experts  # out of range on rank 0 only: every rank must raise
    expect_usage(lambda: buf.dispatch(x, bad, w), "outside", "[0]")
    most = buf.ctx.most_pairs()
    expect_usage(lambda: buf.dispatch(x, idx, w, num_worst_rows=most + 1), "num_worst_rows")
    expect_usage(lambda: buf.dispatch(x, idx, w, num_worst_rows=-1), "num_worst_rows")
    d = buf.dispatch(x, idx, w)  # the buffer still works after the refusals
    expect_usage(lambda: buf.dispatch(x, idx, w), "alternate")
    expect_usage(lambda: buf.combine(d.x[:, :8], d.handle), "must be")
    buf.combine(d.x, d.handle)
    expect_usage(lambda: buf.combine(d.x, d.handle), "alternate")
    expect_usage(lambda: Buffer(comm, 7, 8, experts), "multiple of 16 bytes")
    odd = Buffer(comm, 136, 8, experts)
    expect_usage(lambda: odd.dispatch(x[:8, :136].contiguous(), idx[:8], w[:8], use_fp8=True),
                 "multiple of 128")  # fmt: skip
    expect_usage(lambda: Buffer(comm, HIDDEN, 8, world + 1 if world > 1 else 0), "split")
    expect_usage(lambda: Buffer(comm, HIDDEN, 8, experts, combine="gather"), "combine='gather'")
    expect_usage(lambda: Buffer(comm, HIDDEN, 8, experts, low_latency=True, combine="push"),
                 "low-latency buffer has one")  # fmt: skip
    if world > 1:  # one rank pushing while another pulls: every rank refuses the buffer
        mixed = "push" if me == 0 else "pull"
        expect_usage(lambda: Buffer(comm, HIDDEN, 8, experts, combine=mixed), "different combines")


SCENARIOS = {"values": values, "grad": grad, "fp8": fp8, "badargs": badargs, "worst": worst,
             "tokens": tokens, "overflow": overflow}  # fmt: skip


def main(scenarios: dict = SCENARIOS) -> None:
    """Runs the scenario named by argv[1] as this rank; every rank prints PASS on success."""
    scenario = sys.argv[1]
    comm = gshmem.init()
    scenarios[scenario](comm)
    torch.cuda.synchronize()
    comm.barrier()
    print(f"PASS {scenario}", flush=True)
    comm.finalize()


if __name__ == "__main__":
    main()
