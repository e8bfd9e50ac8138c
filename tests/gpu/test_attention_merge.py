"""The fused log-sum-exp merge (Triton) on one GPU against an fp64 reference, in the layouts the
ring hands it: dense halves (strided rows), packed documents (tokens first, a transposed lse),
fp32 accumulators, in place, and rows no key reached. In place, every warp of a program reads
the lse rows another warp overwrites: repeated on large inputs, a missing barrier shows."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from gshmem.attention import merge  # noqa: E402


def _reference(a, lse_a, b, lse_b):
    a, b, lse_a, lse_b = (t.double() for t in (a, b, lse_a, lse_b))
    lse = torch.logaddexp(lse_a, lse_b)
    w_a = torch.where(torch.isfinite(lse), torch.exp(lse_a - lse), 0.0)
    w_b = torch.where(torch.isfinite(lse), torch.exp(lse_b - lse), 0.0)
    return a * w_a + b * w_b, lse


def _case(layout, a_dtype, out_dtype, g):
    b, h, s, d = 2, 8, 2000, 128
    dev = "cuda"
    if layout == "dense":  # the back half of a [b, h, 2s, d] shard: rows strided by 2s * d
        full = [torch.randn(b, h, 2 * s, d, generator=g, device=dev) for _ in range(3)]
        a, bb, out = (t.narrow(2, s, s) for t in full)
        lses = [torch.randn(b, h, 2 * s, 1, generator=g, device=dev).narrow(2, s, s)
                for _ in range(3)]  # fmt: skip
    else:  # packed [tokens, heads, dim]; lse as the varlen kernel gives it, [heads, tokens].t()
        a, bb, out = (torch.randn(s, h, d, generator=g, device=dev) for _ in range(3))
        lses = [torch.randn(h, s, generator=g, device=dev).t().unsqueeze(-1) for _ in range(3)]
    a, out = a.to(a_dtype), out.to(out_dtype)
    bb = bb.to(torch.bfloat16)
    if layout == "dense":
        lses[0][:, :, :7] = -torch.inf
        lses[1][:, :, :3] = -torch.inf
    else:
        lses[0][:7] = -torch.inf
        lses[1][:3] = -torch.inf
    return a, lses[0], bb, lses[1], out, lses[2]


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["dense", "packed"])
@pytest.mark.parametrize("a_dtype,out_dtype,in_place", [
    (torch.bfloat16, torch.bfloat16, False), (torch.float32, torch.float32, False),
    (torch.float32, torch.bfloat16, False),
    (torch.bfloat16, torch.bfloat16, True), (torch.float32, torch.float32, True),  # out is a
])  # fmt: skip
def test_fused_merge_matches_fp64(layout, a_dtype, out_dtype, in_place):
    for seed in range(10 if in_place else 1):
        g = torch.Generator(device="cuda").manual_seed(seed)
        a, lse_a, b, lse_b, out, lse_out = _case(layout, a_dtype, out_dtype, g)
        want, want_lse = _reference(a, lse_a, b, lse_b)
        out.fill_(torch.nan)
        if in_place:
            out, lse_out = a, lse_a
        assert merge._fits_kernel(a, b, out)
        merge.merge(a, lse_a, b, lse_b, out, lse_out)
        torch.cuda.synchronize()
        tol = 1e-2 if out_dtype == torch.bfloat16 else 1e-5
        torch.testing.assert_close(out.double(), want, atol=tol, rtol=tol)
        torch.testing.assert_close(lse_out.double(), want_lse, atol=1e-5, rtol=1e-5)
        both_empty = torch.isinf(want_lse) & (want_lse < 0)
        assert both_empty.any() and (out.double()[both_empty.expand_as(out)] == 0).all()
