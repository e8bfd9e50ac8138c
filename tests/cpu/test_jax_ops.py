"""gshmem.jax's ops on a CPU mesh of 4 devices: the layout steps around the contiguous transfer
against jax.lax's own ops (values and gradients, under jit + shard_map), with jax.lax's
contiguous equivalents standing in for the GPU transfers; the argument checks; and the lowering,
which must show gshmem's custom calls where the rule sends an op to gshmem."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

if importlib.util.find_spec("jax") is None:
    pytest.skip("jax is not installed", allow_module_level=True)

import jax
import jax.numpy as jnp
from _jax_lax_wire import as_initialised, need_cpu_devices, use_lax_wire
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from gshmem._errors import UsageError
from gshmem.jax import ops, runtime, split

need_cpu_devices(4)


MESH = Mesh(np.array(jax.devices("cpu")[:4]).reshape(2, 2), ("dp", "cp"))


@pytest.fixture
def lax_wire(monkeypatch):
    return use_lax_wire(monkeypatch, MESH)


SPEC = P("dp", "cp")


def _sharded(fn):
    return jax.shard_map(fn, in_specs=SPEC, out_specs=SPEC, check_vma=False)


def _run(fn, x):
    with jax.set_mesh(MESH):
        return jax.jit(_sharded(fn))(x)


CASES = [  # (ours, jax.lax's) on a local block of shape [3, 4, 6]
    (lambda x: ops.ppermute(x, "cp", [(0, 1), (1, 0)]),
     lambda x: jax.lax.ppermute(x, "cp", [(0, 1), (1, 0)])),
    (lambda x: ops.ppermute(x, ("dp", "cp"), [(0, 2), (1, 3), (2, 1)]),
     lambda x: jax.lax.ppermute(x, ("dp", "cp"), [(0, 2), (1, 3), (2, 1)])),
    (lambda x: ops.psum(x, "dp"), lambda x: jax.lax.psum(x, "dp")),
    (lambda x: ops.all_gather(x, "cp", axis=1, tiled=True)[:, :4],
     lambda x: jax.lax.all_gather(x, "cp", axis=1, tiled=True)[:, :4]),
    (lambda x: ops.all_gather(x, "cp", axis=2).sum(2),
     lambda x: jax.lax.all_gather(x, "cp", axis=2).sum(2)),
    (lambda x: jnp.tile(ops.psum_scatter(x, "cp", scatter_dimension=1, tiled=True), (1, 2, 1)),
     lambda x: jnp.tile(jax.lax.psum_scatter(x, "cp", scatter_dimension=1, tiled=True), (1, 2, 1))),
    (lambda x: jnp.tile(ops.psum_scatter(x[:, :2], "cp", scatter_dimension=1)[:, None], (1, 4, 1)),
     lambda x: jnp.tile(jax.lax.psum_scatter(x[:, :2], "cp", scatter_dimension=1)[:, None],
                        (1, 4, 1))),
    (lambda x: ops.all_to_all(x, "cp", 2, 1, tiled=True).reshape(x.shape),
     lambda x: jax.lax.all_to_all(x, "cp", 2, 1, tiled=True).reshape(x.shape)),
    # not tiled: jax.lax's own transpose of this case fails (jax 0.10), so the reference is the
    # same exchange written tiled (test_untiled_all_to_all checks it against jax.lax's values)
    (lambda x: ops.all_to_all(x[:, :2], "cp", 1, 2).reshape(3, 2, 6).repeat(2, 1),
     lambda x: _untiled(x[:, :2]).reshape(3, 2, 6).repeat(2, 1)),
]  # fmt: skip


def _untiled(y):
    """all_to_all(y, "cp", 1, 2) (y's dimension 1 = the axis size) through the tiled form."""
    return jnp.moveaxis(jax.lax.all_to_all(y, "cp", 1, 1, tiled=True), 1, 2)


def test_untiled_all_to_all_reference() -> None:
    x = jax.random.normal(jax.random.key(7), (6, 4, 6), jnp.float32)
    theirs = _run(lambda y: jax.lax.all_to_all(y, "cp", 1, 2).reshape(3, 2, 6), x)
    np.testing.assert_array_equal(_run(lambda y: _untiled(y).reshape(3, 2, 6), x), theirs)


@pytest.mark.parametrize("case", range(len(CASES)))
def test_values_and_gradients_match_jax_lax(lax_wire, case) -> None:
    ours, theirs = CASES[case]
    x = jax.random.normal(jax.random.key(case), (6, 8, 6), jnp.float32)
    mine = _run(ours, x)
    assert lax_wire.calls > 0, "the op took jax.lax's path, not gshmem's"
    np.testing.assert_allclose(mine, _run(theirs, x), rtol=1e-6, atol=1e-6)
    w = jax.random.normal(jax.random.key(100 + case), x.shape, jnp.float32)

    def grad(fn):
        with jax.set_mesh(MESH):
            return jax.jit(jax.grad(lambda y: (_sharded(fn)(y) * w).sum()))(x)

    before = lax_wire.calls
    mine = grad(ours)
    assert lax_wire.calls > before, "the gradient took jax.lax's path, not gshmem's"
    np.testing.assert_allclose(mine, grad(theirs), rtol=1e-5, atol=1e-5)


def test_ppermute_moves_blocks_where_a_hand_count_puts_them(lax_wire) -> None:
    """Over two axes the group's index is 2 * dp + cp: blocks 0 -> 2, 1 -> 3, 2 -> 1, and block
    0, which nobody sends to, is zeros (the reference above is jax.lax's own ppermute)."""
    x = jax.random.normal(jax.random.key(3), (6, 8, 6), jnp.float32)
    perm = [(0, 2), (1, 3), (2, 1)]
    got, xs = np.asarray(_run(lambda y: ops.ppermute(y, ("dp", "cp"), perm), x)), np.asarray(x)

    def block(a, k):  # device (dp, cp) = divmod(k, 2) holds rows 3 dp.., columns 4 cp..
        dp, cp = divmod(k, 2)
        return a[3 * dp : 3 * dp + 3, 4 * cp : 4 * cp + 4]

    np.testing.assert_array_equal(block(got, 0), 0)
    for src, dst in perm:
        np.testing.assert_array_equal(block(got, dst), block(xs, src))


def test_bad_arguments_get_clear_errors(lax_wire) -> None:
    x = jnp.zeros((6, 8, 6))
    for fn, match in [
        (lambda y: ops.ppermute(y, "tp", [(0, 1)]), "'tp' is not in the mesh"),
        (lambda y: ops.ppermute(y, "cp", [(0, 1), (1, 1)]), "not a permutation"),
        (lambda y: ops.psum_scatter(y, "cp", scatter_dimension=2), "needs 2"),
        (lambda y: ops.all_to_all(y[:, :3], "cp", 1, 0, tiled=True), "multiple of 2"),
    ]:
        with pytest.raises(UsageError, match=match):
            _run(fn, x)


def test_ops_need_the_mesh_and_init(monkeypatch) -> None:
    monkeypatch.setattr(runtime, "_state", None)
    fn = jax.shard_map(lambda y: ops.psum(y, "cp"), mesh=MESH, in_specs=P("dp", "cp"),
                       out_specs=P("dp", "cp"))  # fmt: skip
    with pytest.raises(UsageError, match="jax.set_mesh"):
        jax.jit(fn)(jnp.zeros((4, 4)))
    with jax.set_mesh(MESH), pytest.raises(UsageError, match="gshmem.jax.init"):
        jax.jit(fn)(jnp.zeros((4, 4)))


def test_direct_ppermute_host_table() -> None:
    """The host table the direct ppermute's receivers post their outputs in (rendezvous.h):
    calls counted per device and run (16 recent runs apart), each post taken once, a take that
    waits for a post from another thread, a take that times out."""
    import ctypes
    import threading
    import time

    from gshmem.jax import _library

    lib = _library.library()
    lib.gshmem_jax_next_call.restype = ctypes.c_uint64
    lib.gshmem_jax_next_call.argtypes = [ctypes.c_int, ctypes.c_uint64]
    lib.gshmem_jax_post.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int, ctypes.c_void_p]
    lib.gshmem_jax_take.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int, ctypes.c_double,
                                    ctypes.POINTER(ctypes.c_void_p)]  # fmt: skip

    def calls(ordinal: int, run: int, n: int) -> list[int]:
        return [lib.gshmem_jax_next_call(ordinal, run) for _ in range(n)]

    assert calls(60, 1000, 3) == [0, 1, 2]
    assert calls(60, 1001, 2) == [0, 1]  # a new run counts from 0
    assert calls(60, 1000, 1) == [3]  # runs may interleave
    assert calls(61, 1000, 1) == [0]  # per device
    for run in range(2000, 2015):  # 15 more runs: 1001 is the oldest of 16, 1000 is forgotten
        calls(60, run, 1)
    assert calls(60, 1001, 1) == [2]
    assert calls(60, 1000, 1) == [0]

    def take(run: int, call: int, pe: int, seconds: float) -> int | None:
        out = ctypes.c_void_p()
        return out.value or 0 if lib.gshmem_jax_take(run, call, pe, seconds, out) else None

    lib.gshmem_jax_post(7, 0, 3, 0x1000)
    lib.gshmem_jax_post(7, 0, 2, None)  # a receiver that stages: posts null
    assert take(7, 0, 3, 1.0) == 0x1000
    assert take(7, 0, 2, 1.0) == 0
    t0 = time.monotonic()
    assert take(7, 0, 3, 0.05) is None  # taken once
    assert time.monotonic() - t0 >= 0.04
    late = threading.Timer(0.05, lambda: lib.gshmem_jax_post(7, 1, 3, 0x2000))
    late.start()
    assert take(7, 1, 3, 5.0) == 0x2000  # waits for the post
    late.join()


def test_lowering_of_the_copy_engine_ppermutes(monkeypatch) -> None:
    """Above the kernel's sizes, one process (as here) takes the direct target, which puts into
    the receiver's output; GSHMEM_JAX_PPERMUTE_DIRECT=0 keeps the staged one."""
    as_initialised(monkeypatch, MESH)
    monkeypatch.setenv("GSHMEM_JAX_PPERMUTE_KERNEL_MAX", "8")
    x = jnp.zeros((4, 4), jnp.float32)  # 16 bytes per device

    def lowered() -> str:
        f = jax.shard_map(lambda y: ops.ppermute(y, "cp", [(0, 1), (1, 0)]), in_specs=P("dp", "cp"),
                          out_specs=P("dp", "cp"), check_vma=False)  # fmt: skip
        with jax.set_mesh(MESH):
            return jax.jit(f).lower(x).as_text()

    text = lowered()
    assert text.count("@gshmem_ppermute_direct(") == 1 and "@gshmem_ppermute(" not in text
    assert ops.explain("ppermute", 16).startswith("ppermute: gshmem, copy engine direct (")
    monkeypatch.setenv("GSHMEM_JAX_PPERMUTE_DIRECT", "0")
    text = lowered()
    assert text.count("@gshmem_ppermute(") == 1 and "_direct" not in text
    assert "kernel = 0 : i32" in text


def test_lowering_shows_custom_calls_by_the_rule(monkeypatch) -> None:
    as_initialised(monkeypatch, MESH)
    monkeypatch.setenv("GSHMEM_JAX_MAX_BYTES", "4K")

    def f(x, big):
        return (ops.ppermute(x, "cp", [(0, 1), (1, 0)]), ops.psum(x, "dp"),
                ops.all_gather(x, "cp"), ops.psum(big, "dp"))  # fmt: skip

    small, big = jnp.zeros((4, 4), jnp.float32), jnp.zeros((4, 4096), jnp.float32)
    with jax.set_mesh(MESH):
        text = jax.jit(jax.shard_map(f, in_specs=P("dp", "cp"), out_specs=P("dp", "cp"),
                                     check_vma=False)).lower(small, big).as_text()  # fmt: skip
    assert text.count("@gshmem_ppermute") == 1
    assert text.count("@gshmem_all_reduce") == 1  # the big psum (16K per device) goes to XLA
    assert text.count("@gshmem_all_gather") == 1
    assert "all_reduce" in text.replace("gshmem_all_reduce", "")
    # the peer table travels as an attribute: PE p sends to 2p and receives from 2p + 1
    assert "peers = dense<[1, 1, 0, 0, 3, 3, 2, 2]> : tensor<8xi32>" in text
    assert (
        ops.explain("psum", 8192)
        == "psum: xla (8192 B > GSHMEM_JAX_MAX_BYTES (4096 B): XLA's collective)"
    )
    assert ops.explain("psum", jnp.zeros(4, jnp.uint8)).startswith("psum: xla (uint8")
    assert ops.explain("ppermute", 6).startswith("ppermute: gshmem, packets (")
    assert ops.explain("ppermute", 4 << 20).startswith("ppermute: gshmem, bulk (")
    assert ops.explain("ppermute", 32 << 20).startswith("ppermute: gshmem, copy engine direct (")


def test_handlers_library_builds_and_registers() -> None:
    """The FFI handlers were compiled against jaxlib's headers, export every target's symbol,
    register with XLA, and refuse a bad attachment with a message."""
    from gshmem.jax import _library

    lib = _library.library()
    for symbol in _library.TARGETS.values():
        assert getattr(lib, symbol) is not None
    _library.register()
    with pytest.raises(UsageError, match="bad ordinal or null pointer"):
        _library.attach(-1, 0, 0, 0, 0)
    with pytest.raises(UsageError, match=r"SLOT_BYTES\) must hold at least 64K, got 4096"):
        _library.attach(0, 8, 8, 4096, 8)  # checked before the comm is looked at
    assert _library.channels() == split.CHANNELS  # the Python side's count is the library's
    # two halves per slot, a ready flag per PE and an arrived flag in each
    for n in (1, 2, 4):
        assert _library.flags(n) == split.CHANNELS * 2 * (n + 1)
