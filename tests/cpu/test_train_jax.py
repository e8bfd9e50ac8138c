"""gshmem.train.model_jax on the CPU: the same numbers as the PyTorch model given the same
weights, the chunked loss against the plain one, and context parallelism: the model inside
shard_map on a 4-device CPU mesh with gshmem.jax.ring_attention (jax.lax's permute standing in
for the GPU transfer) gives the whole-sequence model's loss and gradients."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

if importlib.util.find_spec("jax") is None:
    pytest.skip("jax is not installed", allow_module_level=True)

import jax
import jax.numpy as jnp
from _jax_lax_wire import need_cpu_devices, use_lax_wire
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from gshmem.jax.attention import ring_attention
from gshmem.jax.attention.layout import order
from gshmem.train import model_jax
from gshmem.train.config import tiny
from gshmem.train.data import repeated_blocks

need_cpu_devices(4)

CFG = tiny()


def _batch(seq):
    tokens, labels = next(repeated_blocks(CFG.vocab, seq, 2, period=5, seed=2))
    return jnp.asarray(tokens.numpy()), jnp.asarray(labels.numpy())


def test_same_numbers_as_the_torch_model() -> None:
    torch = pytest.importorskip("torch")
    from gshmem.train.model import Llama

    params = model_jax.init(CFG, jax.random.key(0))
    m = Llama(CFG).double()
    t = {n: p for n, p in m.named_parameters()}

    def put(name, value):
        t[name].data.copy_(torch.from_numpy(np.asarray(value, np.float64)))

    put("embed.weight", params["embed"])
    put("norm.weight", params["norm"])
    put("output.proj.weight", params["output"].T)
    q_cols = CFG.heads * CFG.head_dim
    for i in range(CFG.layers):
        b = {name: stacked[i] for name, stacked in params[model_jax.BLOCKS].items()}
        put(f"blocks.{i}.attn_norm.weight", b["attn_norm"])
        put(f"blocks.{i}.mlp_norm.weight", b["mlp_norm"])
        put(f"blocks.{i}.attn.q.weight", b["qkv"][:, :q_cols].T)
        put(f"blocks.{i}.attn.kv.weight", b["qkv"][:, q_cols:].T)
        put(f"blocks.{i}.attn.out.weight", b["out"].T)
        put(f"blocks.{i}.mlp.gate_up.weight", b["gate_up"].T)
        put(f"blocks.{i}.mlp.down.weight", b["down"].T)
    tokens, labels = _batch(12)
    hidden = model_jax.forward(params, CFG, tokens, jnp.arange(12))
    ours = model_jax.loss(params, hidden, labels)
    with torch.no_grad():
        their_hidden = m(torch.tensor(np.asarray(tokens)).long(), torch.arange(12))
        theirs = m.output(their_hidden, torch.tensor(np.asarray(labels)).long())
    # the hidden states, not only the loss: at initialisation the loss barely depends on the
    # blocks (a RoPE turning the wrong way moved it by 1e-5 relative, the states by 3e-2)
    np.testing.assert_allclose(np.asarray(hidden), their_hidden.numpy(), atol=1e-5)
    assert float(ours[0]) == pytest.approx(float(theirs[0]), rel=1e-6)
    assert int(ours[1]) == int(theirs[1])


def _count(jaxpr, name: str) -> int:
    """Equations of primitive ``name`` in ``jaxpr`` and every jaxpr nested in its equations
    (scan bodies, checkpoints, custom derivatives)."""
    n = 0
    for eqn in jaxpr.eqns:
        n += eqn.primitive.name == name
        for v in eqn.params.values():
            for sub in v if isinstance(v, list | tuple) else [v]:
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    n += _count(inner, name)
    return n


def test_keeping_attention_recomputes_all_but_the_attention() -> None:
    """Selective checkpointing (keep_attention): the loss and gradients of full checkpointing
    and of none, for every block kept and for one of two (two scans). Counted in the program
    (scan bodies, not iterations): with every block kept the attention's softmax appears as
    often as without checkpointing, once less than with full checkpointing, which recomputes it
    in the backward."""
    params = model_jax.init(CFG, jax.random.key(1))
    tokens, labels = _batch(12)

    def loss_of(checkpoint, keep):
        def f(params):
            hidden = model_jax.forward(params, CFG, tokens, jnp.arange(12),
                                       checkpoint=checkpoint, keep_attention=keep)  # fmt: skip
            total, count = model_jax.loss(params, hidden, labels, 5)
            return total / count

        return f

    want, want_grads = jax.value_and_grad(loss_of(False, 0))(params)
    exps = {}
    for checkpoint, keep in ((True, 0), (True, 1), (True, CFG.layers)):
        got, grads = jax.value_and_grad(loss_of(checkpoint, keep))(params)
        assert float(got) == pytest.approx(float(want), rel=1e-6)
        for a, b in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(want_grads),
                        strict=True):  # fmt: skip
            assert np.allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-7)
        exps[keep] = _count(jax.make_jaxpr(jax.grad(loss_of(checkpoint, keep)))(params).jaxpr,
                            "exp")  # fmt: skip
    none = _count(jax.make_jaxpr(jax.grad(loss_of(False, 0)))(params).jaxpr, "exp")
    assert exps[CFG.layers] == none == exps[0] - 1
    # one kept block then one checkpointed: two scan bodies in the program, the kept one's
    # attention once, the other's in its forward and again in its recompute
    assert exps[1] == none + 2


def test_chunked_loss_matches_plain() -> None:
    params = model_jax.init(CFG, jax.random.key(1))
    tokens, labels = _batch(10)
    hidden = model_jax.forward(params, CFG, tokens, jnp.arange(10))
    total, count = model_jax.loss(params, hidden, labels, chunk=3)
    logits = hidden @ params["output"]
    plain = -jnp.take_along_axis(jax.nn.log_softmax(logits), jnp.maximum(labels, 0)[..., None], -1)
    mask = labels >= 0
    assert int(count) == int(mask.sum())
    assert float(total) == pytest.approx(
        float(jnp.sum(jnp.where(mask, plain[..., 0], 0))), rel=1e-5
    )


MESH = Mesh(np.array(jax.devices("cpu")[:4]), ("cp",))


def test_context_parallel_equals_whole_sequence(monkeypatch) -> None:
    use_lax_wire(monkeypatch, MESH)
    params = model_jax.init(CFG, jax.random.key(2))
    seq = 32
    tokens, labels = _batch(seq)
    idx = order(seq, 4)  # the devices' zigzag shards, one after another

    def whole(p):
        total, count = model_jax.loss(p, model_jax.forward(p, CFG, tokens, jnp.arange(seq)), labels)
        return total / count

    def attend(q, k, v):
        return ring_attention(q, k, v, "cp", implementation="xla")

    def local(p, t, y, pos):
        hidden = model_jax.forward(p, CFG, t, pos, attend, checkpoint=True)
        total, count = model_jax.loss(p, hidden, y, chunk=5)
        return jax.lax.psum(total, "cp")[None], jax.lax.psum(count, "cp")[None]

    def cp(p):
        f = jax.shard_map(local, in_specs=(P(), P(None, "cp"), P(None, "cp"), P("cp")),
                          out_specs=P("cp"), check_vma=False)  # fmt: skip
        total, count = f(p, tokens[:, idx], labels[:, idx], jnp.asarray(idx))
        return total[0] / count[0]

    with jax.set_mesh(MESH):
        got, got_grads = jax.jit(jax.value_and_grad(cp))(params)
    want, want_grads = jax.value_and_grad(whole)(params)
    assert float(got) == pytest.approx(float(want), rel=1e-5)
    for g, w in zip(jax.tree.leaves(got_grads), jax.tree.leaves(want_grads), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6)


def test_sharded_step_equals_one_device(monkeypatch) -> None:
    """make_step on the 4-device mesh (sequence split for the ring, parameters stored sharded)
    leaves the loss and the parameters of the same step on one device (SGD: exact)."""
    from gshmem.train import step_jax

    use_lax_wire(monkeypatch, MESH)
    params = model_jax.init(CFG, jax.random.key(3))
    seq = 32
    tokens, labels = _batch(seq)
    idx = jnp.asarray(order(seq, 4))

    def whole(p):
        total, count = model_jax.loss(p, model_jax.forward(p, CFG, tokens, jnp.arange(seq)), labels)
        return total / count

    want_loss, grads = jax.value_and_grad(whole)(params)
    want = jax.tree.map(lambda p, g: p - 0.5 * g, params, grads)
    opt = step_jax.sgd(0.5)
    with jax.set_mesh(MESH):
        placed = jax.device_put(params, step_jax.shardings(params, MESH, "cp"))
        assert placed["embed"].sharding.spec[0] == "cp"  # vocab 256 splits over 4 devices
        # stacked blocks: each layer's slice splits (hidden 64 rows), not the layer dimension
        assert placed[model_jax.BLOCKS]["qkv"].sharding.spec == P(None, "cp")
        step = step_jax.make_step(CFG, MESH, opt, implementation="xla", chunk=5)
        new, _, loss = step(placed, opt[0](placed), tokens[:, idx], labels[:, idx], idx)
    assert float(loss) == pytest.approx(float(want_loss), rel=1e-5)
    for g, w in zip(jax.tree.leaves(new), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6)


def test_adamw_first_step_is_lr_times_sign() -> None:
    from gshmem.train import step_jax

    init, update = step_jax.adamw(lr=0.1, weight_decay=0.0)
    p = {"w": jnp.array([1.0, -2.0, 3.0])}
    g = {"w": jnp.array([0.5, -4.0, 1e-3])}
    new, state = update(p, g, init(p))
    np.testing.assert_allclose(new["w"], [0.9, -1.9, 2.9], rtol=1e-4)
    assert int(state["t"]) == 1


def test_adamw_steps_match_torch() -> None:
    """Three steps with weight decay and changing gradients against torch.optim.AdamW (its
    decoupled decay and bias corrections): the moments, not only the first step's sign."""
    torch = pytest.importorskip("torch")
    from gshmem.train import step_jax

    init, update = step_jax.adamw(lr=0.01, weight_decay=0.1)
    w = torch.tensor([1.0, -2.0, 3.0, 0.5], requires_grad=True)
    ref = torch.optim.AdamW([w], lr=0.01, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    p = {"w": jnp.array(w.detach().numpy())}
    state = init(p)
    for grad in ([0.5, -4.0, 1e-3, 2.0], [-1.0, 3.0, 0.2, 2.0], [0.1, 0.1, -5.0, -2.0]):
        w.grad = torch.tensor(grad)
        ref.step()
        p, state = update(p, {"w": jnp.array(grad)}, state)
        np.testing.assert_allclose(np.asarray(p["w"]), w.detach().numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(np.asarray(state["m"]["w"]), ref.state[w]["exp_avg"].numpy(),
                               rtol=1e-6)  # fmt: skip
    assert int(state["t"]) == 3


def test_bench_setup_keeps_the_adamw_moments_sharded() -> None:
    """The bench's parameters and AdamW moments are stored split over the mesh like the
    parameters (a jitted zeros_like once put the 8B's 60 GiB of moments on the first GPU)."""
    from gshmem.bench import train_jax
    from gshmem.train import step_jax

    params, state = train_jax.setup(CFG, MESH, step_jax.adamw())
    want = jax.tree.leaves(step_jax.shardings(params, MESH, "cp"))
    for moment in ("m", "v"):
        got = [x.sharding for x in jax.tree.leaves(state[moment])]
        assert [g.spec for g in got] == [w.spec for w in want]
        assert all(g.mesh == MESH for g in got)
    embed = state["m"]["embed"]
    assert embed.addressable_shards[0].data.shape[0] == embed.shape[0] // 4
    assert float(jnp.abs(embed).max()) == 0.0


def test_bench_training_loop_cp_equals_one_device(monkeypatch) -> None:
    """The bench's JAX loop (parameters made sharded, AdamW, the synthetic stream laid out for
    the ring) gives on the 4-device mesh the losses it gives on one device, step by step; bf16
    compute moves them by bf16's rounding only."""
    from gshmem.bench import train_jax

    runs = {}
    for n, dtype in ((4, None), (1, None), (4, "bfloat16")):
        mesh = Mesh(np.array(jax.devices("cpu")[:n]), ("cp",))
        use_lax_wire(monkeypatch, mesh)
        with jax.set_mesh(mesh):
            data = repeated_blocks(CFG.vocab, 32, 2, period=4, seed=0)
            seen = []  # on_step's (step, steps, seconds, loss), after each step
            runs[n, dtype] = train_jax.train(tiny(layers=1), mesh, data, steps=4,
                                             implementation="xla", compute_dtype=dtype,
                                             on_step=lambda *a, to=seen: to.append(a))  # fmt: skip
            losses, seconds = runs[n, dtype]
            steps = enumerate(zip(seconds, losses, strict=True), 1)
            assert seen == [(i, 4, t, x) for i, (t, x) in steps]
    cp, one, bf16 = runs[4, None][0], runs[1, None][0], runs[4, "bfloat16"][0]
    assert len(cp) == 4 and len(runs[4, None][1]) == 4
    np.testing.assert_allclose(cp, one, rtol=1e-5)
    np.testing.assert_allclose(bf16, cp, rtol=2e-2)
    assert not np.array_equal(bf16, cp)  # the cast took place
    assert cp[-1] < cp[0]  # Adam at lr 3e-4 on a tiny model: the loss moves down
