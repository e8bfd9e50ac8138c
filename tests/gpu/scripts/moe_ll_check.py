"""GPU checks of gshmem.moe.Buffer's low-latency mode, run as one rank of `python -m gshmem.run`.

Usage: moe_ll_check.py SCENARIO
  values   dispatch: every local expert's rows, count and sources against every rank's routing
           (each rank regenerates every rank's inputs); combine of simple experts (row x
           scale[e]) against an fp32 reference, with every row past count poisoned with NaN (it
           must not be read). Random routings with unrouted entries, all tokens to expert 0, top-8
           over few ranks, a rank with no tokens, a few tokens with DeepSeek-V3's 7168-wide rows;
           several rounds on one buffer.
  hook     the same with return_recv_hook=True on both directions, other GPU work queued
           between send and receive
  graph    a dispatch -> experts -> combine round captured in one CUDA graph and replayed with
           new tokens and new routings copied into its inputs
  fp8      use_fp8=True: every received row's scales equal its 128-element groups' amax / 448
           and the dequantized row is within e4m3's rounding of the token (groups of very
           different magnitudes), also with 7168-wide rows; the combine of dequantized experts
           within the summed bound
  badargs  clear UsageErrors: shapes, dtypes, too many tokens, calls out of order, the wrong
           mode, a buffer too large for low latency
  trap     rank 0 routes to an expert that does not exist: its kernel stops with a message
           naming the entry (the launcher then stops every rank; nothing may hang)
Prints "PASS <scenario>" on success; any failure raises (non-zero exit).
"""

from __future__ import annotations

import torch
from expect import expect_usage
from moe_check import (
    HIDDEN,
    check_fp8_combine,
    check_fp8_rows,
    close,
    fp8_inputs,
    inputs,
    main,
    reference_combine,
    scales,
)

from gshmem.moe import Buffer

MAX_TOKENS = 96


def expected(me: int, world: int, per: int, everyone):
    """Per local expert: the (src rank, token, choice) of its rows in the order they arrive."""
    rows = [[] for _ in range(per)]
    for s, (_, idx, _) in enumerate(everyone):
        for t, choices in enumerate(idx.tolist()):
            for c, e in enumerate(choices):
                if e >= 0 and e // per == me:
                    rows[e % per].append((s, t, c))
    return rows


def check_dispatch(d, me: int, world: int, per: int, everyone) -> None:
    want = expected(me, world, per, everyone)
    assert d.count.tolist() == [len(r) for r in want], (d.count.tolist(), [len(r) for r in want])
    for e, rows in enumerate(want):
        n = len(rows)
        if not n:
            continue
        src = d.src[e, :n].tolist()
        assert src == [(s << 16) | (t * 8 + c) for s, t, c in rows], f"sources of expert {e}"
        assert d.src_rank[e, :n].tolist() == [s for s, _, _ in rows]
        assert d.src_token[e, :n].tolist() == [t for _, t, _ in rows]
        got = d.x[e, :n]
        ref = torch.stack([everyone[s][0][t] for s, t, _ in rows])
        assert torch.equal(got, ref), f"rows of expert {e} differ"


def experts_apply(d, me: int, per: int, experts: int) -> torch.Tensor:
    """y[l] = bf16(x[l] * scale[me*per + l]); every row past count is NaN."""
    s = scales(experts)[me * per : (me + 1) * per]
    y = (d.x.float() * s[:, None, None]).to(torch.bfloat16)
    slots = torch.arange(y.shape[1], device="cuda")
    return y.masked_fill((slots[None, :] >= d.count[:, None])[..., None], float("nan"))


# Few tokens with DeepSeek-V3's rows: each row is copied in parts by several warps (the kernels
# cut rows so that few pairs still occupy every warp of the grid).
WIDE = 7168

CASES = [  # (tokens on ranks but the last, k, experts per rank, kind, hidden)
    (MAX_TOKENS, 4, 4, "random", HIDDEN),
    (64, 8, 2, "topk", HIDDEN),
    (33, 2, 3, "one_expert", HIDDEN),
    (5, 4, 2, "random", WIDE),
]


def rounds(comm, hook: bool) -> None:
    world, me = comm.nranks, comm.rank
    for seed, (tokens, k, per, kind, hidden) in enumerate(CASES):
        experts = per * world
        k = min(k, experts)
        counts = [tokens if r != world - 1 or world == 1 else 0 for r in range(world)]
        buf = Buffer(comm, hidden, MAX_TOKENS, experts, low_latency=True)
        for call in range(3):
            everyone = [
                inputs(r, counts[r], k, experts, kind, seed * 7 + call, hidden)
                for r in range(world)
            ]
            x, idx, w = everyone[me]
            d = buf.low_latency_dispatch(x, idx, w, return_recv_hook=hook)
            if hook:
                assert d.recv_hook is not None
                a = torch.randn(1024, 1024, device="cuda")
                torch.mm(a, a)  # other work between the send and the receive
                d.recv_hook()
            else:
                assert d.recv_hook is None
            check_dispatch(d, me, world, per, everyone)
            y = experts_apply(d, me, per, experts)
            if hook:
                out, recv = buf.low_latency_combine(y, d.handle, return_recv_hook=True)
                recv()
            else:
                out = buf.low_latency_combine(y, d.handle)
            ref = reference_combine(x, idx, w, experts)
            assert out.shape == x.shape
            assert not out.isnan().any(), "a row past count was read"
            close(out.float(), ref, 2e-2, kind)
        del buf


def values(comm) -> None:
    rounds(comm, hook=False)


def hook(comm) -> None:
    rounds(comm, hook=True)


def graph(comm) -> None:
    world, me = comm.nranks, comm.rank
    per, k, tokens = 4, 4, 64
    experts = per * world
    buf = Buffer(comm, HIDDEN, tokens, experts, low_latency=True)
    x, idx, w = (t.clone() for t in inputs(me, tokens, k, experts, "random", 0))
    scale = scales(experts)[me * per : (me + 1) * per].to(torch.bfloat16)

    def step():
        d = buf.low_latency_dispatch(x, idx, w)
        return buf.low_latency_combine(d.x * scale[:, None, None], d.handle)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()  # warm up outside the capture
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = step()
    for replay in range(4):
        new = inputs(me, tokens, k, experts, "random", 10 + replay)
        for dst, src in zip((x, idx, w), new, strict=True):
            dst.copy_(src)
        g.replay()
        ref = reference_combine(x, idx, w, experts)
        close(out.float(), ref, 2e-2, f"replay {replay}")
    torch.cuda.synchronize()


def fp8(comm) -> None:
    for tokens, hidden in ((MAX_TOKENS, HIDDEN), (5, WIDE)):  # WIDE: quantized in parts
        fp8_rounds(comm, tokens, hidden)


def fp8_rounds(comm, tokens: int, hidden: int) -> None:
    world, me = comm.nranks, comm.rank
    per, k = 3, min(4, 3 * world)
    experts = per * world
    buf = Buffer(comm, hidden, MAX_TOKENS, experts, low_latency=True)
    for call in range(2):
        everyone = [fp8_inputs(r, tokens, k, experts, 40 + call, hidden) for r in range(world)]
        x, idx, w = everyone[me]
        d = buf.low_latency_dispatch(x, idx, w, use_fp8=True)
        assert d.x.dtype == torch.float8_e4m3fn
        assert d.scales.shape == (per, world * MAX_TOKENS, hidden // 128)
        want = expected(me, world, per, everyone)
        assert d.count.tolist() == [len(r) for r in want]
        for e, rows in enumerate(want):
            n = len(rows)
            if n:
                assert d.src[e, :n].tolist() == [(s << 16) | (t * 8 + c) for s, t, c in rows]
                sent = torch.stack([everyone[s][0][t] for s, t, _ in rows])
                check_fp8_rows(d.x[e, :n], d.scales[e, :n], sent)
        slots = torch.arange(d.x.shape[1], device="cuda")
        valid = (slots[None, :] < d.count[:, None])[..., None]
        deq = d.x.float() * d.scales.repeat_interleave(128, dim=-1)
        s_local = scales(experts)[me * per : (me + 1) * per][:, None, None]
        y = torch.where(valid, deq * s_local, 0.0).to(torch.bfloat16)
        check_fp8_combine(buf.low_latency_combine(y, d.handle), x, idx, w, experts)


def badargs(comm) -> None:
    world, me = comm.nranks, comm.rank
    experts = 2 * world
    buf = Buffer(comm, HIDDEN, 64, experts, low_latency=True)
    x, idx, w = inputs(me, 64, 2, experts, "random", 3)
    expect_usage(lambda: buf.low_latency_dispatch(x.half(), idx, w), "bfloat16")
    expect_usage(lambda: buf.low_latency_dispatch(x[:, :128], idx, w), f"[tokens, {HIDDEN}]")
    expect_usage(lambda: buf.low_latency_dispatch(torch.cat([x, x]), torch.cat([idx, idx]),
                                                  torch.cat([w, w])), "exceed")  # fmt: skip
    expect_usage(lambda: buf.low_latency_dispatch(x, idx, w.double()), "float32")
    expect_usage(lambda: buf.low_latency_dispatch(x, idx[:8], w[:8]), "one row per token")
    expect_usage(lambda: buf.dispatch(x, idx, w), "low_latency_dispatch")
    d = buf.low_latency_dispatch(x, idx, w, return_recv_hook=True)
    expect_usage(lambda: buf.low_latency_combine(d.x, d.handle), "out of order", "receive hook")
    expect_usage(lambda: buf.low_latency_dispatch(x, idx, w), "out of order")
    d.recv_hook()
    expect_usage(d.recv_hook, "out of order")
    expect_usage(lambda: buf.low_latency_combine(d.x[:, :8], d.handle), "must be")
    out, recv = buf.low_latency_combine(d.x, d.handle, return_recv_hook=True)
    expect_usage(lambda: buf.low_latency_dispatch(x, idx, w), "out of order")
    recv()
    d2 = buf.low_latency_dispatch(x, idx, w)
    expect_usage(lambda: buf.low_latency_combine(d2.x, d.handle), "latest dispatch")
    buf.low_latency_combine(d2.x, d2.handle)
    expect_usage(lambda: Buffer(comm, HIDDEN, 257, experts, low_latency=True), "1..256")
    odd = Buffer(comm, 136, 8, experts, low_latency=True)
    expect_usage(lambda: odd.low_latency_dispatch(x[:8, :136].contiguous(), idx[:8], w[:8],
                                                  use_fp8=True), "multiple of 128")  # fmt: skip
    ht = Buffer(comm, HIDDEN, 64, experts)
    expect_usage(lambda: ht.low_latency_dispatch(x, idx, w), "high-throughput", "dispatch/combine")


def trap(comm) -> None:
    world, me = comm.nranks, comm.rank
    experts = 2 * world
    buf = Buffer(comm, HIDDEN, 16, experts, low_latency=True)
    x, idx, w = inputs(me, 16, 2, experts, "random", 5)
    if me == 0:
        idx[3, 1] = experts + 7
    d = buf.low_latency_dispatch(x, idx, w)
    buf.low_latency_combine(d.x, d.handle)
    torch.cuda.synchronize()  # rank 0 raises here; the others wait for rank 0 until stopped


SCENARIOS = {"values": values, "hook": hook, "graph": graph, "fp8": fp8, "badargs": badargs,
             "trap": trap}  # fmt: skip


if __name__ == "__main__":
    main(SCENARIOS)
