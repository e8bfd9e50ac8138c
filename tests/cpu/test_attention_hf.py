"""CPU tests of gshmem.attention.hf (the transformers integration): shard_inputs' positions and
label shift, the loss recipe, the mask rule (plain causal accepted without materialising a mask;
padding, packed documents, sliding windows and KV-cache decoding refused), the attention
function's argument checks, and whole Llama forwards and backwards with ring_attention replaced
by an exact in-process stand-in (one rank, and W ranks on threads) against the unsharded model."""

from __future__ import annotations

import copy
import subprocess
import sys
import threading
from dataclasses import dataclass

import pytest

torch = pytest.importorskip("torch")

from gshmem import UsageError  # noqa: E402
from gshmem.attention import hf, layout  # noqa: E402

IGNORE = -100


@dataclass
class FakeComm:
    """What the integration reads from a comm (ring_attention itself is replaced here)."""

    rank: int
    nranks: int
    alive: bool = True


# -- import and shard_inputs -------------------------------------------------------------------
def test_imports_without_transformers():
    code = (
        "import sys; sys.modules['transformers'] = None\n"
        "import gshmem.attention.hf as hf\n"
        "try:\n    hf.register()\nexcept hf.UsageError as e:\n    print('refused:', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "refused: gshmem.attention.hf.register needs transformers" in out.stdout


def test_shard_inputs_positions_and_shifted_labels():
    ids = torch.arange(100, 108).unsqueeze(0)  # S = 8, W = 2: chunks of 2
    r0 = hf.shard_inputs(ids, world=2, rank=0)
    r1 = hf.shard_inputs(ids, world=2, rank=1)
    assert r0.input_ids.tolist() == [[100, 101, 106, 107]]
    assert r1.input_ids.tolist() == [[102, 103, 104, 105]]
    # global positions, sharded like the tokens (RoPE sees the unsharded angles)
    assert r0.position_ids.tolist() == [[0, 1, 6, 7]]
    assert r1.position_ids.tolist() == [[2, 3, 4, 5]]
    # shifted on the full sequence: token t's label is token t+1, the last one is ignored;
    # shifting each shard would have paired 101 with 106 and 103 with 104's neighbour
    assert r0.shift_labels.tolist() == [[101, 102, 107, IGNORE]]
    assert r1.shift_labels.tolist() == [[103, 104, 105, 106]]


def test_shard_inputs_given_labels_positions_and_contiguous():
    ids = torch.arange(12).reshape(2, 6)
    labels = ids.clone()
    labels[0, 2] = IGNORE  # e.g. a prompt token: its position's target is dropped after the shift
    pos = torch.arange(6).unsqueeze(0) + 10  # [1, S] broadcasts over the batch
    r1 = hf.shard_inputs(ids, pos, labels, world=3, rank=1, layout="contiguous")
    assert r1.input_ids.tolist() == [[2, 3], [8, 9]]
    assert r1.position_ids.tolist() == [[12, 13]]
    assert r1.shift_labels.tolist() == [[3, 4], [9, 10]]
    r0 = hf.shard_inputs(ids, pos, labels, world=3, rank=0, layout="contiguous")
    assert r0.shift_labels.tolist() == [[1, IGNORE], [7, 8]]
    full = torch.cat([hf.shard_inputs(ids, world=3, rank=r, layout="contiguous").input_ids
                      for r in range(3)], 1)  # fmt: skip
    assert torch.equal(full, ids)


def test_shard_inputs_errors():
    ids = torch.zeros(1, 8, dtype=torch.long)
    with pytest.raises(UsageError, match="input_ids must be"):
        hf.shard_inputs(ids[0], world=2, rank=0)
    with pytest.raises(UsageError, match="position_ids must be"):
        hf.shard_inputs(ids, torch.arange(8), world=2, rank=0)
    with pytest.raises(UsageError, match="labels must be"):
        hf.shard_inputs(ids, labels=torch.zeros(1, 6, dtype=torch.long), world=2, rank=0)
    with pytest.raises(UsageError, match="equal chunks"):
        hf.shard_inputs(ids, world=3, rank=0)  # 8 tokens, 6 zigzag chunks
    with pytest.raises(UsageError, match="layout must be"):
        hf.shard_inputs(ids, world=2, rank=0, layout="ring")


@pytest.mark.parametrize("world", [2, 4])
def test_loss_recipe_equals_full_loss(world):
    transformers = pytest.importorskip("transformers")
    from transformers.loss.loss_utils import ForCausalLMLoss

    del transformers
    g = torch.Generator().manual_seed(0)
    vocab, seq = 11, 8 * world
    ids = torch.randint(0, vocab, (2, seq), generator=g)
    labels = ids.clone()
    labels[:, :3] = IGNORE  # unlabelled prompt tokens: ranks hold unequal label counts
    logits = torch.randn(2, seq, vocab, generator=g)
    full = ForCausalLMLoss(logits, labels, vocab)
    n = (hf.shard_inputs(ids, labels=labels, world=1, rank=0).shift_labels != IGNORE).sum()
    total = 0.0
    for r in range(world):
        sh = hf.shard_inputs(ids, labels=labels, world=world, rank=r)
        local = layout.shard(logits, world, r, dim=1)
        total += ForCausalLMLoss(
            local, sh.shift_labels, vocab, num_items_in_batch=n, shift_labels=sh.shift_labels
        )
    torch.testing.assert_close(total, full)


# -- the mask rule -----------------------------------------------------------------------------
def tiny_config(name: str, **extra):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        **extra,
    )
    cfg._attn_implementation = name
    return cfg


def causal_mask(cfg, positions, attention_mask=None, past=None):
    from transformers.masking_utils import create_causal_mask

    embeds = torch.zeros(positions.shape[0], positions.shape[1], cfg.hidden_size)
    return create_causal_mask(cfg, embeds, attention_mask, past, position_ids=positions)


def test_register_installs_attention_and_mask_functions():
    pytest.importorskip("transformers")
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    name = hf.register(FakeComm(0, 2), name="gshmem_ring_test_install")
    assert name == "gshmem_ring_test_install"
    assert ALL_ATTENTION_FUNCTIONS[name].__name__ == "gshmem_ring_attention"
    assert ALL_MASK_ATTENTION_FUNCTIONS[name].__name__ == "gshmem_ring_mask"
    with pytest.raises(UsageError, match="layout must be"):
        hf.register(layout="ring", name="gshmem_ring_bad")
    with pytest.raises(UsageError, match="backend must be"):
        hf.register(backend="mpi", name="gshmem_ring_bad")


@pytest.mark.parametrize("kind", ["zigzag", "contiguous"])
@pytest.mark.parametrize("world", [1, 2, 4])
def test_plain_causal_builds_no_mask(kind, world):
    pytest.importorskip("transformers")
    name = hf.register(layout=kind, name=f"gshmem_ring_test_{kind}")
    cfg = tiny_config(name)
    for rank in range(world):
        pos = hf.shard_inputs(torch.zeros(2, 16 * world), world=world, rank=rank, layout=kind)
        assert causal_mask(cfg, pos.position_ids) is None
        ones = torch.ones(2, pos.position_ids.shape[1], dtype=torch.long)
        assert causal_mask(cfg, pos.position_ids, attention_mask=ones) is None


def test_mask_rule_refusals():
    transformers = pytest.importorskip("transformers")
    from transformers.masking_utils import (
        create_sliding_window_causal_mask,
        sliding_window_causal_mask_function,
    )

    name = hf.register(name="gshmem_ring_test_refusals")
    cfg = tiny_config(name)
    pos = hf.shard_inputs(torch.zeros(1, 32), world=2, rank=0).position_ids
    padding = torch.ones(1, 16, dtype=torch.long)
    padding[0, -3:] = 0
    with pytest.raises(UsageError, match="padding mask"):
        causal_mask(cfg, pos, attention_mask=padding)
    # packed documents: positions restart inside the shard (a restart exactly at the middle
    # looks like the zigzag jump here; the attention function's position check refuses it)
    packed = torch.tensor([[0, 1, 2, 0, 1, 2, 3, 4]])
    with pytest.raises(UsageError, match="other than plain causal"):
        causal_mask(cfg, packed)
    with pytest.raises(UsageError, match="global positions"):
        hf.check_positions(torch.tensor([[0, 1, 2, 3, 0, 1, 2, 3]]), 8, 0, 2, "zigzag")
    # the zigzag jump is accepted only under the zigzag layout
    ccfg = tiny_config(hf.register(layout="contiguous", name="gshmem_ring_test_refusals_c"))
    with pytest.raises(UsageError, match="other than plain causal"):
        causal_mask(ccfg, pos)
    # decoding on a cache that already holds tokens
    cache = transformers.DynamicCache(config=cfg)
    k = torch.zeros(1, 2, 5, 8)
    cache.update(k, k, 0)
    with pytest.raises(UsageError, match="KV caches are not supported"):
        causal_mask(cfg, torch.tensor([[5]]), past=cache)
    # sliding-window layers: refused from the config (as transformers' supports_context_parallel
    # rules), and from the mask function even without it
    scfg = tiny_config(name, sliding_window=4)
    embeds = torch.zeros(1, 16, cfg.hidden_size)
    with pytest.raises(UsageError, match="sliding_window layers"):
        create_sliding_window_causal_mask(scfg, embeds, None, None, position_ids=pos)
    lcfg = tiny_config(name, layer_types=["full_attention", "sliding_attention"])
    with pytest.raises(UsageError, match="sliding_attention layers"):
        causal_mask(lcfg, pos)
    with pytest.raises(UsageError, match="other than plain causal"):
        hf.check_mask_request("zigzag", 16, 16, 0, 0, sliding_window_causal_mask_function(4), None)


# -- the attention function's checks -----------------------------------------------------------
class Module(torch.nn.Module):
    def __init__(self, layer_idx: int = 1, **config) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.is_causal = True
        self.config = type("Config", (), config)()


def qkv(seq: int = 8):
    q = torch.randn(1, 4, seq, 8)
    k = torch.randn(1, 2, seq, 8)
    return q, k, k.clone()


def test_attention_function_refusals(monkeypatch):
    monkeypatch.setattr(hf, "ring_attention", lambda *a, **k: pytest.fail("must not be called"))
    fn = hf.make_attention_function(FakeComm(0, 2), None, "zigzag", "auto", "cp")
    q, k, v = qkv()
    with pytest.raises(UsageError, match="cannot apply a mask"):
        fn(Module(), q, k, v, torch.ones(1, 1, 8, 8, dtype=torch.bool))
    with pytest.raises(UsageError, match="attention dropout"):
        fn(Module(), q, k, v, None, dropout=0.1)
    with pytest.raises(UsageError, match="output_attentions"):
        fn(Module(), q, k, v, None, output_attentions=True)
    with pytest.raises(UsageError, match="output_attentions"):
        fn(Module(output_attentions=True), q, k, v, None)
    with pytest.raises(UsageError, match="sliding-window"):
        fn(Module(), q, k, v, None, sliding_window=4)
    with pytest.raises(UsageError, match="attention sinks"):
        fn(Module(), q, k, v, None, s_aux=torch.zeros(4))
    with pytest.raises(UsageError, match="KV-cache decoding"):
        fn(Module(), q[:, :, :1], k, v, None)
    # local positions (the model's default when position_ids are not given) are refused in layer
    # 0; the global ones pass the check and reach ring_attention
    local = torch.arange(8).unsqueeze(0)
    with pytest.raises(UsageError, match="global positions"):
        fn(Module(layer_idx=0), q, k, v, None, position_ids=local)
    monkeypatch.setattr(hf, "ring_attention", lambda q, k, v, **kw: q)
    glob = torch.tensor([[0, 1, 2, 3, 12, 13, 14, 15]])
    out, weights = fn(Module(layer_idx=0), q, k, v, None, position_ids=glob)
    assert weights is None and out.shape == (1, 8, 4, 8) and out.is_contiguous()


def test_attention_function_passes_its_arguments(monkeypatch):
    seen = {}

    def fake(q, k, v, **kw):
        seen.update(kw, shapes=(q.shape, k.shape, v.shape))
        return q

    monkeypatch.setattr(hf, "ring_attention", fake)
    comm, team = FakeComm(1, 2), None
    fn = hf.make_attention_function(comm, team, "contiguous", "nccl", "cp")
    q, k, v = qkv()
    fn(Module(), q, k, v, None, scaling=0.25, is_causal=False, position_ids=None)
    assert seen == {
        "comm": comm,
        "team": None,
        "causal": False,
        "scale": 0.25,
        "layout": "contiguous",
        "backend": "nccl",
        "shapes": (q.shape, k.shape, v.shape),  # K/V keep their 2 heads: GQA is not expanded
    }


# -- whole models, ring_attention replaced by an exact stand-in --------------------------------
class Exchange:
    """All-gather between W threads (the stand-in's only communication)."""

    def __init__(self, world: int) -> None:
        self.slots: list = [None] * world
        self.barrier = threading.Barrier(world, timeout=60)

    def all_gather(self, rank: int, item):
        self.slots[rank] = item
        self.barrier.wait()
        items = list(self.slots)
        self.barrier.wait()
        return items


def exact_ring(exchange: Exchange, kv_heads: int, calls: list):
    """ring_attention's contract computed exactly: the local queries (global positions from the
    layout) against every rank's keys, gathered with autograd so gradients flow back to the rank
    that owns each key, as the real ring's backward sends dK/dV home."""

    def fake(q, k, v, *, comm, team, causal, scale, layout, backend):
        assert team is None and backend == "auto" and causal
        assert k.shape[1] == v.shape[1] == kv_heads < q.shape[1]  # GQA heads travel unexpanded
        calls.append(comm.rank)
        world, rank = comm.nranks, comm.rank
        gathered = exchange.all_gather(rank, (k, v))
        k_full = hf._layout.unshard([g[0] for g in gathered], layout, dim=2)
        v_full = hf._layout.unshard([g[1] for g in gathered], layout, dim=2)
        rep = q.shape[1] // kv_heads
        k_full, v_full = (t.repeat_interleave(rep, dim=1) for t in (k_full, v_full))
        seq = k_full.shape[2]
        qpos = torch.tensor(hf._layout.token_index(seq, world, rank, layout))
        allowed = qpos[:, None] >= torch.arange(seq)[None, :]
        scores = (q @ k_full.transpose(-1, -2)) * scale
        scores = scores.masked_fill(~allowed, float("-inf"))
        return torch.softmax(scores, -1) @ v_full

    return fake


def run_ranks(fns):
    results: list = [None] * len(fns)

    def run(i):
        try:
            results[i] = fns[i]()
        except BaseException as e:  # noqa: BLE001 - re-raised in the main thread
            results[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(fns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return results


@pytest.mark.parametrize(("world", "kind"), [(1, "zigzag"), (2, "zigzag"), (3, "zigzag"),
                                            (2, "contiguous")])  # fmt: skip
def test_llama_forward_backward_matches_unsharded(monkeypatch, world, kind):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = tiny_config("sdpa")
    ref = transformers.LlamaForCausalLM(cfg).float()
    seq = 16 * world
    ids = torch.randint(0, cfg.vocab_size, (2, seq))
    labels = ids.clone()
    labels[0, :5] = IGNORE
    out = ref(input_ids=ids, labels=labels, use_cache=False)
    out.loss.backward()

    calls: list = []
    exchange = Exchange(world)
    monkeypatch.setattr(hf, "ring_attention", exact_ring(exchange, cfg.num_key_value_heads, calls))
    models, shards = [], []
    n = (hf.shard_inputs(ids, labels=labels, world=1, rank=0).shift_labels != IGNORE).sum()
    for r in range(world):
        name = hf.register(FakeComm(r, world), layout=kind, name=f"gshmem_ring_test_w{world}_r{r}")
        model = copy.deepcopy(ref)
        model.zero_grad()
        model.set_attn_implementation(name)
        models.append(model)
        shards.append(hf.shard_inputs(ids, labels=labels, world=world, rank=r, layout=kind))

    def forward(r):
        s = shards[r]
        return models[r](
            input_ids=s.input_ids,
            position_ids=s.position_ids,
            labels=s.shift_labels,
            shift_labels=s.shift_labels,
            num_items_in_batch=n,
            use_cache=False,
        )

    outs = run_ranks([lambda r=r: forward(r) for r in range(world)])
    assert sorted(calls) == sorted(list(range(world)) * cfg.num_hidden_layers)
    logits = hf._layout.unshard([o.logits for o in outs], kind, dim=1)
    torch.testing.assert_close(logits, out.logits, atol=2e-5, rtol=2e-5)
    loss = sum(o.loss for o in outs)  # what an all-reduce (sum) of the per-rank losses gives
    torch.testing.assert_close(loss, out.loss)
    loss.backward()  # one graph: each rank's loss reaches the keys of every rank
    for pname, p in ref.named_parameters():
        grad = sum(dict(m.named_parameters())[pname].grad for m in models)  # all-reduce (sum)
        torch.testing.assert_close(grad, p.grad, atol=2e-5, rtol=1e-4, msg=pname)


def test_llama_without_global_positions_is_refused(monkeypatch):
    transformers = pytest.importorskip("transformers")
    monkeypatch.setattr(hf, "ring_attention", lambda *a, **k: pytest.fail("must not be called"))
    name = hf.register(FakeComm(0, 2), name="gshmem_ring_test_positions")
    model = transformers.LlamaForCausalLM(tiny_config(name))
    shard = hf.shard_inputs(torch.randint(0, 64, (1, 32)), world=2, rank=0)
    with pytest.raises(UsageError, match="global positions"):
        model(input_ids=shard.input_ids)  # the model's default positions are the local arange


def test_llama_compiles_whole(monkeypatch):
    """The mask function and the checks trace into one graph (fullgraph=True): what cannot be
    checked while compiling (tensor contents, closures) is skipped there, not a graph break."""
    transformers = pytest.importorskip("transformers")

    def sdpa(q, k, v, **kw):
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=True, enable_gqa=True
        )

    monkeypatch.setattr(hf, "ring_attention", sdpa)
    torch.manual_seed(0)
    name = hf.register(FakeComm(0, 2), name="gshmem_ring_test_compile")
    model = transformers.LlamaForCausalLM(tiny_config(name))
    shard = hf.shard_inputs(torch.randint(0, 64, (1, 32)), world=2, rank=0)
    inputs = {"input_ids": shard.input_ids, "position_ids": shard.position_ids, "use_cache": False}
    eager = model(**inputs).logits
    compiled = torch.compile(model, fullgraph=True, backend="eager")(**inputs).logits
    torch.testing.assert_close(compiled, eager)
