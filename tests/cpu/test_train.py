"""gshmem.train on the CPU: the FLOP counter against a count from the parameters, the model's
shapes, RoPE's relative positions, the chunked loss against the plain one, the synthetic data,
and context parallelism's split and merge: a tiny model trained on a ring of threads (the real
ring loops, exact local kernel) gives the loss and gradients of the same model on the whole
sequence."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

from _ring_threads import run_ring  # noqa: E402

from gshmem.attention import ring  # noqa: E402
from gshmem.attention.local import Dense  # noqa: E402
from gshmem.tcp_ports import free_port  # noqa: E402
from gshmem.train.config import LLAMA3_8B, tiny  # noqa: E402
from gshmem.train.cp import shard_batch  # noqa: E402
from gshmem.train.data import ideal_loss, next_token_labels, repeated_blocks  # noqa: E402
from gshmem.train.flops import train_flops  # noqa: E402
from gshmem.train.loss import IGNORE, chunked_cross_entropy  # noqa: E402
from gshmem.train.model import Llama, rope  # noqa: E402


def test_flops_against_parameter_count() -> None:
    cfg, seq = LLAMA3_8B, 131072
    # 6 FLOPs per matmul weight per token (2 forward, 4 backward), and attention's two
    # products, 2 x 2 x S^2 x H x D forward, half of it under the causal mask, x 3 for training
    by_params = 6 * seq * cfg.matmul_params()
    attention = 3 * 2 * 2 * seq * seq * cfg.heads * cfg.head_dim * cfg.layers / 2
    assert train_flops(cfg, 1, seq) == pytest.approx(by_params + attention, rel=1e-12)
    assert 7.4e9 < cfg.matmul_params() < 7.6e9  # Llama-3-8B: 8.0B with the 0.5B embedding
    # two sequences, no mask: twice the weights' FLOPs, four times the causal attention
    assert train_flops(cfg, 2, seq, causal=False) == pytest.approx(
        2 * by_params + 4 * attention, rel=1e-12
    )
    # heads x head_dim other than hidden (matmul_params is checked against the model's weights)
    wide, s = replace(tiny(), head_dim=16), 64
    att = 3 * 2 * 2 * s * s * wide.heads * wide.head_dim * wide.layers / 2
    assert train_flops(wide, 1, s) == pytest.approx(6 * s * wide.matmul_params() + att, rel=1e-12)


def test_model_shapes_and_parameter_count() -> None:
    cfg = tiny()
    model = Llama(cfg)
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    assert linear == cfg.matmul_params()
    tokens = torch.randint(0, cfg.vocab, (2, 16))
    h = model(tokens, torch.arange(16))
    assert h.shape == (2, 16, cfg.hidden)
    # heads x head_dim other than hidden: the projections' shapes follow the heads
    wide = replace(cfg, head_dim=16)
    model = Llama(wide)
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    assert linear == wide.matmul_params() and wide.heads * wide.head_dim != wide.hidden
    assert model(tokens, torch.arange(16)).shape == (2, 16, wide.hidden)
    with pytest.raises(ValueError, match="must divide"):
        tiny().__class__(heads=6, kv_heads=4)


def test_rope_depends_on_relative_position() -> None:
    q, k = (
        torch.randn(1, 5, 2, 8, dtype=torch.float64),
        torch.randn(1, 5, 2, 8, dtype=torch.float64),
    )
    p = torch.arange(5)

    def scores(shift):
        a, b = rope(q, p + shift, 100.0), rope(k, p.flip(0) + shift, 100.0)
        return torch.einsum("bshd,bthd->bhst", a, b)

    assert torch.allclose(scores(0), scores(37), atol=1e-5)
    assert not torch.allclose(scores(0), torch.einsum("bshd,bthd->bhst", q, k))
    assert not torch.allclose(rope(q, p + 1, 100.0), rope(q, p, 100.0))
    # one value by hand: pair (i, i + D/2) at position t turns by t * theta ** (-2i / D)
    x = torch.zeros(1, 1, 1, 8, dtype=torch.float64)
    x[..., 1] = 1.0
    turned = rope(x, torch.tensor([3]), 100.0)[0, 0, 0]
    angle = 3 * 100.0 ** (-2 / 8)
    assert turned[1].item() == pytest.approx(math.cos(angle), abs=1e-12)
    assert turned[5].item() == pytest.approx(math.sin(angle), abs=1e-12)


def test_chunked_loss_matches_plain_cross_entropy() -> None:
    torch.manual_seed(0)
    h = torch.randn(3, 10, 16, dtype=torch.float64, requires_grad=True)
    w = torch.randn(50, 16, dtype=torch.float64, requires_grad=True)
    y = torch.randint(0, 50, (3, 10))
    y[0, -1] = y[2, 3] = IGNORE
    total, count = chunked_cross_entropy(h, w, y, chunk=7)
    plain = torch.nn.functional.cross_entropy((h @ w.T).reshape(-1, 50), y.reshape(-1),
                                              ignore_index=IGNORE, reduction="sum")  # fmt: skip
    assert count == 28 and torch.allclose(total, plain)
    g = torch.autograd.grad(total, (h, w))
    assert all(
        torch.allclose(a, b) for a, b in zip(g, torch.autograd.grad(plain, (h, w)), strict=True)
    )


def test_synthetic_data() -> None:
    tokens, labels = next(repeated_blocks(100, 20, 3, period=6, seed=1))
    assert tokens.shape == (3, 20) and torch.equal(tokens[:, 6:], tokens[:, :-6])
    assert torch.equal(labels[:, :-1], tokens[:, 1:]) and (labels[:, -1] == IGNORE).all()
    again, _ = next(repeated_blocks(100, 20, 3, period=6, seed=1))
    assert torch.equal(tokens, again)
    assert ideal_loss(100, 20, 6) == pytest.approx(5 * math.log(100) / 19)
    assert torch.equal(next_token_labels(torch.tensor([4, 5, 6])), torch.tensor([5, 6, IGNORE]))


class _RingAttend(torch.autograd.Function):
    """The ring's forward and backward loops as autograd (what gshmem.attention's op does)."""

    @staticmethod
    def forward(ctx, q, k, v, rg, problem):
        out, lse, last = ring.forward(rg, problem, q, k, v)
        ctx.save_for_backward(q, k, v, out, lse, last)
        ctx.rg, ctx.problem = rg, problem
        return out

    @staticmethod
    def backward(ctx, dout):
        return (*ring.backward(ctx.rg, ctx.problem, dout, *ctx.saved_tensors), None, None)


@pytest.mark.parametrize("world", [2, 4])
def test_context_parallel_step_equals_whole_sequence(world) -> None:
    """Each rank runs the model on its zigzag shard (global positions for RoPE, labels made on
    the whole sequence); the loss sums and the gradients summed over ranks equal one model on
    the whole sequence."""
    cfg = tiny()
    torch.manual_seed(3)
    model = Llama(cfg).double()
    tokens, labels = next(repeated_blocks(cfg.vocab, 8 * world, 2, period=5, seed=4))
    hidden = model(tokens, torch.arange(tokens.shape[1]))
    total, count = model.output(hidden, labels, chunk=5)
    (total / count).backward()
    want = {n: p.grad.clone() for n, p in model.named_parameters()}
    problem = ring.Problem(True, cfg.head_dim**-0.5, "zigzag", Dense("cpu"))

    def rank(rg):
        replica = Llama(cfg).double()
        replica.load_state_dict(model.state_dict())
        t, y, pos = shard_batch(tokens, labels, world, rg.index)
        h = replica(t, pos, lambda q, k, v: _RingAttend.apply(q, k, v, rg, problem))
        loss_sum, n = replica.output(h, y, chunk=5)
        (loss_sum / count).backward()  # the global token count: ranks' sums add up
        return loss_sum.detach(), n, {name: p.grad for name, p in replica.named_parameters()}

    results = run_ring(world, rank)
    assert sum(r[1] for r in results) == count
    loss = sum(r[0] for r in results)
    # (the ring's exact kernel returns its log-sum-exp in fp32: agreement to ~1e-7)
    assert torch.allclose(loss, total.detach(), rtol=1e-6), (loss - total).abs()
    for name, g in want.items():
        got = sum(r[2][name] for r in results)
        assert torch.allclose(got, g, rtol=1e-5, atol=1e-8), (name, (got - g).abs().max())


@pytest.mark.parametrize(("keep", "compiled"), [(0, 0), (1, 0), (1, 1)])
def test_fsdp_step_equals_one_process(tmp_path, keep, compiled) -> None:
    """train_step under FSDP2 on 2 gloo processes, each with half of the batch, gives the loss
    and the updated parameters of one process stepping on the whole batch; also with the first
    block's attention kept rather than recomputed (its checkpoints run inside FSDP's hooks), and
    with the blocks' pieces compiled (compile_blocks) under those hooks."""
    import subprocess
    import sys
    from pathlib import Path

    import _train_worker as worker

    from gshmem.train.step import train_step

    port = free_port()
    script = Path(__file__).with_name("_train_worker.py")
    procs = [subprocess.Popen([sys.executable, str(script), str(r), "2", str(port), str(tmp_path),
                               str(keep), str(compiled)], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT)
             for r in range(2)]  # fmt: skip
    outs = [p.communicate(timeout=180)[0].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(outs)
    results = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]

    ref = worker.model()
    tokens, labels = worker.batch()
    opt = torch.optim.SGD(ref.parameters(), lr=0.5)
    loss = train_step(ref, opt, tokens, labels, torch.arange(tokens.shape[1]), worker.sdpa,
                      chunk=7, clip=worker.NO_CLIP)  # fmt: skip
    for r in results:
        assert r["loss"] == pytest.approx(loss, rel=1e-5)
        for name, p in ref.named_parameters():
            assert torch.allclose(r["params"][name], p.detach(), rtol=1e-4, atol=1e-6), name


def test_keeping_attention_recomputes_all_but_the_attention() -> None:
    """Selective checkpointing (keep_attention): the same loss and gradients as full
    checkpointing and as none, and the kept blocks' attention runs once per step (full
    checkpointing runs it again in the backward)."""
    from gshmem.train.model import sdpa

    cfg = tiny()
    tokens, labels = next(repeated_blocks(cfg.vocab, 12, 2, period=5, seed=3))
    positions = torch.arange(tokens.shape[1])
    results = {}
    keeps = {"none": 0, "full": 0, "keep": cfg.layers, "keep1": 1}
    for mode in keeps:
        torch.manual_seed(0)
        model = Llama(cfg)
        calls = []

        def attend(q, k, v, calls=calls):
            calls.append(q.shape)
            return sdpa(q, k, v)

        checkpoint, keep = mode != "none", keeps[mode]
        hidden = model(tokens, positions, attend, checkpoint=checkpoint, keep_attention=keep)
        loss = model.output(hidden, labels, 5)[0]
        loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        results[mode] = (loss.item(), grads, len(calls))
    # keeping the first block's attention only: the other blocks run theirs again backward
    assert [results[m][2] for m in keeps] == [cfg.layers, 2 * cfg.layers, cfg.layers,
                                              2 * cfg.layers - 1]  # fmt: skip
    for mode in ("full", "keep", "keep1"):
        assert results[mode][0] == pytest.approx(results["none"][0], rel=1e-6)
        for name, g in results["none"][1].items():
            assert torch.allclose(results[mode][1][name], g, rtol=1e-5, atol=1e-7), (mode, name)


@pytest.mark.parametrize("mode", ["none", "full", "keep"])
def test_compiled_blocks_match_eager(mode) -> None:
    """compile_blocks: each block's two pieces around the attention are captured whole
    (fullgraph: a graph break raises) and give eager's loss and gradients without, with full
    and with selective checkpointing; the attention stays outside the graphs."""
    from gshmem.train.model import sdpa

    cfg = tiny()
    tokens, labels = next(repeated_blocks(cfg.vocab, 12, 2, period=5, seed=6))
    positions = torch.arange(tokens.shape[1])
    checkpoint, keep = mode != "none", cfg.layers if mode == "keep" else 0
    results, graphs = [], []

    def count_graphs(gm, example_inputs):  # a torch.compile backend: run what was captured
        graphs.append(gm)
        return gm.forward

    for compiled in (False, True):
        torch.manual_seed(0)
        model = Llama(cfg)
        if compiled:
            torch._dynamo.reset()
            model.compile_blocks(backend=count_graphs)
        hidden = model(tokens, positions, sdpa, checkpoint=checkpoint, keep_attention=keep)
        loss = model.output(hidden, labels, 5)[0]
        loss.backward()
        results.append((loss.item(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    # the two pieces' graphs, which every block reuses (recaptured where checkpointing's
    # recomputation changes what dynamo guards on): RoPE's rotation in one, SwiGLU in the other
    texts = [str(g.graph) for g in graphs]
    assert any("sin" in t and "cat" in t for t in texts) and any("silu" in t for t in texts)
    assert not any("scaled_dot_product_attention" in t for t in texts)
    assert results[1][0] == pytest.approx(results[0][0], rel=1e-6)
    for name, g in results[0][1].items():
        assert torch.allclose(results[1][1][name], g, rtol=1e-5, atol=1e-7), name


def test_text_corpus_windows_are_next_byte_pairs() -> None:
    from gshmem.train.text import BYTE_VOCAB, corpus, decode, encode, text_windows

    text = corpus()
    assert len(text) > 100_000 and "assert" in text  # Python's language reference
    ids = encode(text)
    assert int(ids.max()) < BYTE_VOCAB and decode(ids[:500]) == text.encode()[:500].decode()
    tokens, labels = next(text_windows(64, 3, seed=5))
    assert tokens.shape == labels.shape == (3, 64)
    assert torch.equal(tokens[:, 1:], labels[:, :-1])  # labels are the next bytes
    haystack = text.encode()
    for row, lab in zip(tokens, labels, strict=True):  # real windows of the corpus
        assert bytes(torch.cat([row, lab[-1:]]).tolist()) in haystack
    again, _ = next(text_windows(64, 3, seed=5))
    assert torch.equal(tokens, again)  # the same on every rank for one seed
    with pytest.raises(ValueError, match="below the corpus"):
        next(text_windows(ids.numel(), 1))
