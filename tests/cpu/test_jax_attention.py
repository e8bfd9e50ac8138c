"""gshmem.jax's ring attention on the CPU: the SPMD schedule against a brute-force mask, the
merge and the block gradients against whole-sequence attention, and the ring itself on a
4-device CPU mesh (jax.lax's ppermute standing in for the GPU transfer) against attention on the
whole sequence, outputs and gradients, in float32."""

from __future__ import annotations

import importlib.util
import re

import numpy as np
import pytest

from gshmem.attention.layout import token_index

if importlib.util.find_spec("jax") is None:
    pytest.skip("jax is not installed", allow_module_level=True)

import jax
import jax.numpy as jnp
from _jax_lax_wire import as_initialised, need_cpu_devices, use_lax_wire
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from gshmem._errors import UsageError
from gshmem.jax.attention import ring_attention, shard, unshard
from gshmem.jax.attention.local import block, block_grads
from gshmem.jax.attention.merge import merge
from gshmem.jax.attention.schedule import part_range, source_before, step_blocks

need_cpu_devices(4)


@pytest.mark.parametrize("layout", ["zigzag", "contiguous"])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("world", range(1, 9))
def test_schedule_covers_the_mask_once(world, causal, layout) -> None:
    seq = 4 * world
    for me in range(world):
        mine = token_index(seq, world, me, layout)
        seen = np.zeros((seq, seq), int)
        for s in range(world):
            theirs = token_index(seq, world, (me - s) % world, layout)
            front = source_before(s, me)
            for b in step_blocks(s, world, layout, causal):
                if b.if_source_before and not front:
                    continue
                qa, qb = part_range(b.q, len(mine), front)
                ka, kb = part_range(b.kv, len(theirs), front)
                for i, qi in enumerate(mine[qa:qb]):
                    for j, kj in enumerate(theirs[ka:kb]):
                        if not b.causal or j <= i:
                            seen[qi, kj] += 1
        want = np.tril(np.ones((seq, seq), int)) if causal else np.ones((seq, seq), int)
        assert np.array_equal(seen[mine], want[mine]), (world, me)


def _qkv(key, t, hq=4, hkv=2, d=16):
    ks = jax.random.split(jax.random.key(key), 4)
    return [
        jax.random.normal(k, (2, t, h, d), jnp.float32)
        for k, h in zip(ks, (hq, hkv, hkv, hq), strict=True)
    ]


def _full(q, k, v, causal=True):
    return jax.nn.dot_product_attention(q, k, v, is_causal=causal, implementation="xla")


def test_merge_and_block_grads_give_whole_attention() -> None:
    """Two key blocks merged by lse, and their block gradients summed, equal attention over
    all the keys and its gradients (non-causal blocks of a longer key set)."""
    q, k, v, do = _qkv(0, 8)
    k2, v2 = (jnp.concatenate([t, t[:, ::-1] * 0.5], 1) for t in (k, v))  # 16 keys
    scale = q.shape[-1] ** -0.5
    parts = [(k2[:, :8], v2[:, :8]), (k2[:, 8:], v2[:, 8:])]
    out = jnp.zeros(q.shape, jnp.float32)
    lse = jnp.full(q.shape[:-1], -jnp.inf)
    for kb, vb in parts:
        out, lse = merge(out, lse, *block(q, kb, vb, False, scale, "xla"))
    ref, grads = jax.vjp(lambda a, b, c: _full(a, b, c, False), q, k2, v2)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    want = grads(do)
    got = [block_grads(q, kb, vb, False, scale, "xla", do, out, lse) for kb, vb in parts]
    np.testing.assert_allclose(got[0][0] + got[1][0], want[0], rtol=1e-4, atol=1e-5)
    for i in (1, 2):
        np.testing.assert_allclose(jnp.concatenate([got[0][i], got[1][i]], 1), want[i],
                                   rtol=1e-4, atol=1e-5)  # fmt: skip


def test_merge_of_nothing_is_nothing() -> None:
    o = jnp.ones((1, 2, 1, 4))
    lse = jnp.full((1, 2, 1), -jnp.inf)
    out, new = merge(jnp.zeros_like(o), lse, o, lse)
    assert np.all(np.asarray(out) == 0) and np.all(np.isneginf(np.asarray(new)))


MESH = Mesh(np.array(jax.devices("cpu")[:4]), ("cp",))


@pytest.fixture
def lax_wire(monkeypatch):
    return use_lax_wire(monkeypatch, MESH)


@pytest.mark.parametrize(("layout", "causal", "world"), [
    ("zigzag", True, 4), ("contiguous", True, 4), ("zigzag", False, 4),
    # the backward's edges: no K/V hop at W = 2, one at W = 3
    ("zigzag", True, 2), ("zigzag", True, 3), ("contiguous", False, 3),
])  # fmt: skip
@pytest.mark.parametrize("algorithm", ["ring", "allgather"])
def test_ring_matches_whole_sequence(lax_wire, layout, causal, world, algorithm) -> None:
    q, k, v, do = _qkv(1, 48 if world == 3 else 32)  # 2W chunks of whole tokens
    spec = P(None, "cp")
    mesh = MESH if world == 4 else Mesh(np.array(jax.devices("cpu")[:world]), ("cp",))

    def ring(a, b, c):
        f = jax.shard_map(lambda x, y, z: ring_attention(x, y, z, "cp", causal=causal,
                                                         layout=layout, implementation="xla",
                                                         algorithm=algorithm),
                          in_specs=spec, out_specs=spec, check_vma=False)  # fmt: skip
        return unshard(f(*(shard(t, world, layout) for t in (a, b, c))), world, layout)

    with jax.set_mesh(mesh):
        out, grads = jax.vjp(jax.jit(ring), q, k, v)
        got = grads(do)
    assert lax_wire.calls >= world - 1, "the K/V did not travel through gshmem.jax's permutes"
    ref, ref_grads = jax.vjp(lambda a, b, c: _full(a, b, c, causal), q, k, v)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    for g, w in zip(got, ref_grads(do), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_ring_bad_input(lax_wire) -> None:
    q, k, v, _ = _qkv(2, 12)
    spec = P(None, "cp")
    for args, match in [
        ((q, k[:, :, :1].repeat(3, 2), v[:, :, :1].repeat(3, 2)), "do not divide"),
        ((q, k, v.astype(jnp.bfloat16)), "dtypes differ"),
        ((q[:, :4], k[:, :4], v[:, :4]), "is odd"),  # 1 token per device
    ]:
        f = jax.shard_map(lambda x, y, z: ring_attention(x, y, z, "cp"), in_specs=spec,
                          out_specs=spec, check_vma=False)  # fmt: skip
        with jax.set_mesh(MESH), pytest.raises(UsageError, match=match):
            jax.jit(f)(*args)


def _lowered_ring_grad(monkeypatch, backend: str | None, remat: bool = False,
                       algorithm: str = "ring") -> str:  # fmt: skip
    """The StableHLO of the ring's gradient with the real custom calls (ops.FfiWire); ``remat``:
    under jax.checkpoint, as the models run their layers."""
    as_initialised(monkeypatch, MESH)
    if backend is not None:
        monkeypatch.setenv("GSHMEM_JAX_PPERMUTE_BACKEND", backend)
    q, k, v, _ = _qkv(3, 32)
    spec = P(None, "cp")
    ring = jax.shard_map(lambda x, y, z: ring_attention(x, y, z, "cp", implementation="xla",
                                                        algorithm=algorithm),
                         in_specs=spec, out_specs=spec, check_vma=False)  # fmt: skip
    if remat:
        ring = jax.checkpoint(ring)
    loss = jax.grad(lambda a, b, c: ring(a, b, c).sum(), argnums=(0, 1, 2))
    with jax.set_mesh(MESH):
        return jax.jit(loss).lower(q, k, v).as_text()


def test_ring_rotations_are_split_around_the_blocks(monkeypatch) -> None:
    """Every rotation is a start/done pair of custom calls: at W = 4 the forward sends K/V
    3 times, the backward K/V twice (W - 2 hops) and dK/dV 3 times, one call per array; done
    returns start's buffer (aliased), and the blocks compute on K/V tied to the starts
    (optimization barriers). K/V travel on channels 1-2 (to the right in the forward, to the
    left in the backward: the receivers' per-sender ready flags keep the directions apart),
    dK/dV on 3-4."""
    text = _lowered_ring_grad(monkeypatch, None)
    starts, dones = text.count("@gshmem_ppermute_start"), text.count("@gshmem_ppermute_done")
    assert starts == dones == 2 * (3 + 2 + 3), (starts, dones)
    assert "@gshmem_ppermute(" not in text  # no synchronous rotation is left
    assert text.count("output_operand_aliases") >= dones
    assert "optimization_barrier" in text
    for channel, count in ((1, 3 + 2), (2, 3 + 2), (3, 3), (4, 3)):
        assert text.count(f"channel = {channel} : i32, peers") == count, channel
    _check_starts_and_ties(text, starts)


def _check_starts_and_ties(text: str, starts: int) -> None:
    """A start's received array (result #0) is used by its done alone: XLA must not read it, copy
    it or alias it before the transfers land; the barriers take the dataless token (#1)."""
    checked = barriers_checked = 0
    regions = text.split("sdy.manual_computation(")[1:] or [text]  # SSA names are per region
    for func in regions:
        for name in re.findall(r"(%\w+):2 = stablehlo\.custom_call @gshmem_ppermute_start", func):
            uses = [line for line in func.splitlines() if re.search(rf"{name}#0\b", line)]
            assert len(uses) == 1 and "@gshmem_ppermute_done" in uses[0], uses
            checked += 1
        # every barrier's tokens go on to a done: XLA drops barrier outputs nothing uses, and
        # with them the tie that keeps the starts ahead of the blocks (seen on the GPU: every
        # start then ran after its step's blocks)
        for name, count, types in re.findall(
            r"(%\w+):(\d+) = stablehlo\.optimization_barrier [^:]*: (.*)", func
        ):
            tokens = [i for i, t in enumerate(types.split(", ")) if t == "tensor<1xi32>"]
            assert tokens and len(types.split(", ")) == int(count), types
            for i in tokens:
                uses = [line for line in func.splitlines() if re.search(rf"{name}#{i}\b", line)]
                assert any("@gshmem_ppermute_done" in line for line in uses), (name, i)
                barriers_checked += 1
    assert checked == starts
    assert barriers_checked >= starts  # each start held once at least


def test_allgather_transfers_are_split_around_the_local_block(monkeypatch) -> None:
    """The all-gather schedule at W = 4: the forward's gathering is 3 start/done pairs (shift
    1..3, K and V stacked in one array, channels 1-3) tied to the local block, and so is the
    backward's return of the key/value gradients; no synchronous collective is left."""
    text = _lowered_ring_grad(monkeypatch, None, algorithm="allgather")
    starts, dones = text.count("@gshmem_ppermute_start"), text.count("@gshmem_ppermute_done")
    assert starts == dones == 3 + 3, (starts, dones)
    assert "@gshmem_ppermute(" not in text and "@gshmem_all_gather" not in text
    for channel, count in ((1, 2), (2, 2), (3, 2), (4, 0)):
        assert text.count(f"channel = {channel} : i32, peers") == count, channel
    _check_starts_and_ties(text, starts)


def test_auto_counts_the_gathered_kv_once_per_batch_entry(monkeypatch) -> None:
    """auto's memory bound (W - 1 shards of K/V, GATHER_MAX_BYTES) counts the all-gather's
    copies: 32K tokens per device of 8 bf16 KV heads (128 MiB of K/V, 384 MiB gathered) fit it
    non-causal (one batch entry) but not causal zigzag (two entries: 768 MiB), which takes the
    ring (the forward's K/V: 3 stacked starts gathered, 6 rotated one array a call)."""
    as_initialised(monkeypatch, MESH)
    monkeypatch.delenv("GSHMEM_ATTENTION_ALGORITHM", raising=False)
    q = jax.ShapeDtypeStruct((1, 4 * 32768, 8, 128), jnp.bfloat16)
    kv = jax.ShapeDtypeStruct((1, 4 * 32768, 8, 128), jnp.bfloat16)
    spec = P(None, "cp")
    for causal, starts in ((False, 3), (True, 6)):
        f = jax.shard_map(lambda x, y, z, c=causal: ring_attention(x, y, z, "cp", causal=c,
                                                                   implementation="xla"),
                          in_specs=spec, out_specs=spec, check_vma=False)  # fmt: skip
        with jax.set_mesh(MESH):
            text = jax.jit(f).lower(q, kv, kv).as_text()
        assert text.count("@gshmem_ppermute_start") == starts, causal


def test_ring_rotations_lower_under_checkpoint(monkeypatch) -> None:
    """The models remat their layers: the custom calls carry no JAX effect that jax.checkpoint
    would refuse, and the rotations are all there."""
    text = _lowered_ring_grad(monkeypatch, None, remat=True)
    assert text.count("@gshmem_ppermute_start") >= 2 * (3 + 2 + 3)
    assert text.count("@gshmem_ppermute_start") == text.count("@gshmem_ppermute_done")


def test_ring_rotations_on_xla_are_collective_permutes(monkeypatch) -> None:
    """GSHMEM_JAX_PPERMUTE_BACKEND=xla: the same ring over XLA's collective, no custom call."""
    text = _lowered_ring_grad(monkeypatch, "xla")
    assert "gshmem_ppermute" not in text
    assert text.count("collective_permute") == 2 * (3 + 2 + 3)


def test_split_permute_refuses_channels_out_of_range(lax_wire) -> None:
    from gshmem.jax.split import CHANNELS, ppermute_start

    x = jnp.zeros((4, 2))
    for channel, leaves in [(0, 1), (CHANNELS - 1, 2), (CHANNELS, 1)]:
        f = jax.shard_map(lambda a, c=channel, n=leaves: ppermute_start(
            (a,) * n, "cp", [(0, 1), (1, 0)], channel=c).received[0],
            in_specs=P("cp"), out_specs=P("cp"), check_vma=False)  # fmt: skip
        with jax.set_mesh(MESH), pytest.raises(UsageError, match="not within 1.."):
            jax.jit(f)(x)
