"""GPU checks of gshmem.jax in either JAX layout.

Usage: jax_check.py SCENARIO
  One process driving every visible GPU when started directly; one process per GPU under
  ``python -m gshmem.run -n N`` (jax.distributed through JAX_COORDINATOR_PORT).
  values   every op on random data against its jax.lax twin under jit + shard_map: ppermute
           (ring both ways, a partial permutation's zeros, an operand larger than the staging
           slot), psum, all_gather, psum_scatter, all_to_all; float32, bfloat16, int32
  grad     jax.grad through ppermute and psum against jax.lax's
  loop     a ring rotation repeated in lax.scan, and a jitted training-style loop (gradients
           summed over the axis each step) against the same with jax.lax
  split    ppermute_start/_done (the ring's overlapped rotations) against jax.lax.ppermute:
           two arrays on two channels with computation between start and done, a chain of
           rotations on one channel, an operand larger than the slot, a partial permutation;
           one channel carrying both directions with two exchanges in flight on it
  staged   every ppermute through the staging slot, made 64 KiB (32 KiB chunks) before init:
           from less than one chunk to thousands per call with odd tails, repeated calls in
           lax.scan, and split above
  direct   the same ppermutes on the copy engines straight into the receiver's output (one
           process driving every GPU; per GPU they are staged)
  badargs  an axis name not in the mesh, a non-permutation, a bad scatter dimension
  attention_ring, attention_allgather  ring_attention with that algorithm (zigzag causal,
           contiguous causal, non-causal; GQA) against attention on the whole sequence computed
           in float32 on one device (each process's own): outputs and the three gradients
           (gathered from every process), float32 (XLA's kernel)
           and bfloat16 (JAX's default: cuDNN); one scenario per algorithm, so that a parallel
           run compiles their six programs each on its own worker
Prints "PASS <scenario>" per process on success; any failure raises (non-zero exit).
"""

from __future__ import annotations

import functools
import itertools
import os
import sys

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # the gshmem heap needs room

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")  # float32 checks: no TF32
import numpy as np  # noqa: E402
from expect import expect_usage  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

if "GSHMEM_RANK" in os.environ:  # one process per GPU
    rank, world = int(os.environ["GSHMEM_RANK"]), int(os.environ["GSHMEM_WORLD_SIZE"])
    device = int(os.environ.get("GSHMEM_DEVICE", rank))  # --devices 0,0: PEs sharing a GPU
    jax.distributed.initialize(f"127.0.0.1:{os.environ['JAX_COORDINATOR_PORT']}", world, rank,
                               local_device_ids=[device])  # fmt: skip

if sys.argv[1:2] == ["staged"]:
    os.environ.update(GSHMEM_JAX_SLOT_BYTES="64K", GSHMEM_JAX_PPERMUTE_KERNEL_MAX="0",
                      GSHMEM_JAX_PPERMUTE_DIRECT="0")  # fmt: skip
if sys.argv[1:2] == ["direct"]:
    os.environ.update(GSHMEM_JAX_PPERMUTE_KERNEL_MAX="0")

import gshmem.jax as gj  # noqa: E402

gj.init()
DEVICES = jax.devices()
N = len(DEVICES)
MESH = Mesh(np.array(DEVICES), ("x",))
SPEC = P("x")


def sharded(fn):
    return jax.shard_map(fn, in_specs=SPEC, out_specs=SPEC, check_vma=False)


def run(fn, *xs):
    with jax.set_mesh(MESH):
        return jax.jit(sharded(fn))(*xs)


def rand(key, shape, dtype):
    """A global array sharded over the mesh: each device's block differs."""
    if jnp.issubdtype(dtype, jnp.integer):
        x = jax.random.randint(jax.random.key(key), shape, -1000, 1000, dtype)
    else:
        x = jax.random.normal(jax.random.key(key), shape, jnp.float32).astype(dtype)
    return jax.device_put(x, NamedSharding(MESH, SPEC))


def local(x):
    """This process's blocks of a sharded array (all of it with one process)."""
    return np.concatenate([np.asarray(s.data, np.float64) for s in x.addressable_shards])


def same(a, b, exact=True, tol=0.0):
    a, b = local(a), local(b)
    if exact:
        assert np.array_equal(a, b), f"differ at {np.argwhere(a != b)[:5].tolist()}"
    else:
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


def values():
    ring = [(i, (i + 1) % N) for i in range(N)]
    back = [(d, s) for s, d in ring]
    partial = ring[:-1]  # device 0 receives nothing: zeros
    ident = [(i, i) for i in range(N)]  # every device keeps its own
    for k, dtype in enumerate((jnp.float32, jnp.bfloat16, jnp.int32)):
        tol = 0 if dtype == jnp.int32 else (2e-2 if dtype == jnp.bfloat16 else 1e-5)
        for rows in (1, 3 * N, 4096 * N):
            x = rand(10 * k + rows, (rows * N, 37), dtype)
            for perm in (ring, back, partial, ident):
                same(run(lambda a, p=perm: gj.ppermute(a, "x", p), x),
                     run(lambda a, p=perm: jax.lax.ppermute(a, "x", p), x))  # fmt: skip
            same(run(lambda a: gj.all_gather(a, "x", tiled=True)[None], x),
                 run(lambda a: jax.lax.all_gather(a, "x", tiled=True)[None], x))  # fmt: skip

            same(run(lambda a: gj.psum(a, "x"), x), run(lambda a: jax.lax.psum(a, "x"), x),
                 exact=tol == 0, tol=tol * N)  # fmt: skip
            if rows % N:  # all_to_all and psum_scatter split each block into N
                continue
            same(run(lambda a: gj.all_to_all(a, "x", 0, 0, tiled=True), x),
                 run(lambda a: jax.lax.all_to_all(a, "x", 0, 0, tiled=True), x))  # fmt: skip
            same(run(lambda a: jnp.tile(gj.psum_scatter(a, "x", tiled=True), (N, 1)), x),
                 run(lambda a: jnp.tile(jax.lax.psum_scatter(a, "x", tiled=True), (N, 1)), x),
                 exact=tol == 0, tol=tol * N)  # fmt: skip
    big = rand(99, (N * (80 << 20) // 4 // 256, 256), jnp.float32)  # 80 MiB per device > slot
    same(
        run(lambda a: gj.ppermute(a, "x", ring), big),
        run(lambda a: jax.lax.ppermute(a, "x", ring), big),
    )


def grad():
    ring = [(i, (i + 1) % N) for i in range(N)]
    x, w = rand(1, (8 * N, 64), jnp.float32), rand(2, (8 * N, 64), jnp.float32)

    def grad_of(f):
        with jax.set_mesh(MESH):
            # w as an argument: a jitted function may not close over another process's blocks
            loss = lambda a, ww: (sharded(lambda b: jnp.sin(f(b)))(a) * ww).sum()  # noqa: E731
            return jax.jit(jax.grad(loss))(x, w)

    same(grad_of(lambda b: gj.ppermute(b, "x", ring)),
         grad_of(lambda b: jax.lax.ppermute(b, "x", ring)), exact=False, tol=1e-6)  # fmt: skip
    same(grad_of(lambda b: gj.psum(b, "x")), grad_of(lambda b: jax.lax.psum(b, "x")),
         exact=False, tol=1e-5)  # fmt: skip


def loop():
    ring = [(i, (i + 1) % N) for i in range(N)]

    def rotate(permute):
        def body(carry, _):
            return permute(carry, "x", ring) * 1.0001 + 1.0, None

        return lambda a: jax.lax.scan(body, a, None, length=50)[0]

    x = rand(3, (4 * N, 1000), jnp.float32)
    same(run(rotate(gj.ppermute), x), run(rotate(jax.lax.ppermute), x), exact=False, tol=1e-5)

    def train(psum):
        def step(w, data):
            g = jax.grad(lambda v: ((data @ v) ** 2).mean())(w)
            return w - 0.1 * psum(g, "x") / N

        def fn(w, data):
            return jax.lax.fori_loop(0, 20, lambda _, v: step(v, data), w)

        return fn

    w0 = jnp.tile(jax.random.normal(jax.random.key(4), (16, 16)), (N, 1)) * 0.1
    w0 = jax.device_put(w0, NamedSharding(MESH, SPEC))
    data = rand(5, (32 * N, 16), jnp.float32)
    same(run(train(gj.psum), w0, data), run(train(jax.lax.psum), w0, data), exact=False, tol=1e-5)


def split():
    from gshmem.jax.split import ppermute_done, ppermute_start

    ring = [(i, (i + 1) % N) for i in range(N)]
    partial = ring[:-1]

    def overlapped(perm, hops):
        def fn(a, b):
            pair, acc = (a, b), jnp.zeros_like(a)
            for _ in range(hops):  # every hop: start, compute on what is held, done after it
                pending = ppermute_start(pair, "x", perm, channel=1)
                held, pending = pending.hold(pair)
                acc = acc + held[0] @ jnp.ones((a.shape[1], a.shape[1]), a.dtype)
                pair = ppermute_done(pending, acc)
            return pair[0] + pair[1] + acc

        return fn

    def reference(perm, hops):
        def fn(a, b):
            pair, acc = (a, b), jnp.zeros_like(a)
            for _ in range(hops):
                acc = acc + pair[0] @ jnp.ones((a.shape[1], a.shape[1]), a.dtype)
                pair = tuple(jax.lax.ppermute(t, "x", perm) for t in pair)
            return pair[0] + pair[1] + acc

        return fn

    for rows, perm, hops in (
        (4 * N, ring, 1),
        (512 * N, ring, 2 * N + 1),
        (64 * N, partial, 3),
        (N * (80 << 20) // 4 // 256, ring, 2),
    ):  # 80 MiB > the slot
        # small integers in float32: every row sum is exact in any order, so the two programs
        # agree bit for bit and any wrong, stale or torn hop shows
        a, b = (rand(key, (rows, 256), jnp.int32).astype(jnp.float32) // 125
                for key in (rows, rows + 1))  # fmt: skip
        same(run(overlapped(perm, hops), a, b), run(reference(perm, hops), a, b))

    back = [(d, src) for src, d in ring]

    def both_ways(a, b):  # right then left on channel 3, both in flight before either done
        right = ppermute_start(a, "x", ring, channel=3)
        left = ppermute_start(b, "x", back, channel=3)
        return ppermute_done(right) + 2 * ppermute_done(left)

    a, b = rand(7, (64 * N, 256), jnp.float32), rand(8, (64 * N, 256), jnp.float32)
    same(run(both_ways, a, b),
         run(lambda x, y: jax.lax.ppermute(x, "x", ring) + 2 * jax.lax.ppermute(y, "x", back),
             a, b))  # fmt: skip


def copy_engine_permutes():
    ring = [(i, (i + 1) % N) for i in range(N)]
    back = [(d, src) for src, d in ring]
    ident = [(i, i) for i in range(N)]
    # KiB per device (rows): chunks of 32 KiB (staged) <1, 1, 2 with a 1 KiB tail, 2, 4, 94
    for rows in (1, 32, 33, 64, 97, 3001):
        x = rand(rows, (rows * N, 256), jnp.int32)
        for perm in (ring, back, ring[:-1], ident):
            same(run(lambda a, p=perm: gj.ppermute(a, "x", p), x),
                 run(lambda a, p=perm: jax.lax.ppermute(a, "x", p), x))  # fmt: skip

    def rotate(permute):  # 20 calls of 4 chunks: each half's flags reused across calls
        body = lambda c, _: (permute(c, "x", ring) + 1, None)  # noqa: E731
        return lambda a: jax.lax.scan(body, a, None, length=20)[0]

    x = rand(5, (97 * N, 256), jnp.int32)
    same(run(rotate(gj.ppermute), x), run(rotate(jax.lax.ppermute), x))


def staged():
    copy_engine_permutes()
    split()


def direct():
    from gshmem.jax import _library

    before = _library.direct_puts()
    copy_engine_permutes()
    if jax.process_count() == 1:  # every ring send, and scan's, went straight into the output
        assert _library.direct_puts() - before >= 6 * 2 * N + 20 * N, _library.direct_puts()


def badargs():
    x = rand(6, (4 * N, 8), jnp.float32)
    expect_usage(lambda: run(lambda a: gj.ppermute(a, "y", [(0, 0)]), x), "'y' is not in the mesh")
    expect_usage(
        lambda: run(lambda a: gj.ppermute(a, "x", [(0, 0), (0, 0)]), x), "not a permutation"
    )
    expect_usage(
        lambda: run(lambda a: gj.psum_scatter(a, "x", scatter_dimension=1), x), f"needs {N}"
    )


def attention(algo: str):
    from gshmem.jax.attention import ring_attention, shard, unshard

    spec = P(None, "x")
    dtypes = ((jnp.float32, "xla", 2e-5), (jnp.bfloat16, None, 3e-2))
    masks = (("zigzag", True), ("contiguous", True), ("zigzag", False))
    cases = itertools.product(dtypes, masks)
    for (dtype, impl, tol), (layout, causal) in cases:
        ks = jax.random.split(jax.random.key(11), 4)
        q, k, v, do = (jax.random.normal(kk, (1, 256 * N, h, 64), jnp.float32)
                       for kk, h in zip(ks, (8, 2, 2, 8), strict=True))  # fmt: skip

        def ring(a, b, c, layout=layout, causal=causal, impl=impl, algo=algo):
            def attend(x, y, z):
                return ring_attention(x, y, z, "x", causal=causal, layout=layout,
                                      implementation=impl, algorithm=algo)  # fmt: skip

            f = sharded_specs(attend, spec)
            return unshard(f(*(shard(t, N, layout) for t in (a, b, c))), N, layout)

        with jax.set_mesh(MESH):  # the whole arrays on every device: global in either layout
            whole = NamedSharding(MESH, P())
            out, vjp = jax.vjp(jax.jit(ring), *(jax.device_put(t.astype(dtype), whole)
                                                for t in (q, k, v)))  # fmt: skip
            grads = vjp(jax.device_put(do.astype(dtype), whole))
        ref, ref_vjp = jax.vjp(lambda a, b, c, causal=causal: jax.nn.dot_product_attention(
            a, b, c, is_causal=causal, implementation="xla"), q, k, v)  # fmt: skip
        for got, want in zip((out, *grads), (ref, *ref_vjp(do)), strict=True):
            got, want = np.asarray(gathered(got), np.float64), np.asarray(want, np.float64)
            err = np.abs(got - want).max() / max(np.abs(want).max(), 1e-6)
            assert err < tol, (str(dtype), layout, causal, algo, err)


def gathered(x):
    """The whole value of a global array on this process (one process per GPU: from every
    process; tiled, since the array spans processes and JAX gathers those only whole)."""
    if jax.process_count() == 1:
        return x
    from jax.experimental import multihost_utils

    return multihost_utils.process_allgather(x, tiled=True)


def sharded_specs(fn, spec):
    return jax.shard_map(fn, in_specs=spec, out_specs=spec, check_vma=False)


SCENARIOS = {"values": values, "grad": grad, "loop": loop, "badargs": badargs, "split": split,
             "staged": staged, "direct": direct,
             "attention_ring": functools.partial(attention, "ring"),
             "attention_allgather": functools.partial(attention, "allgather")}  # fmt: skip

if __name__ == "__main__":
    name = sys.argv[1]
    SCENARIOS[name]()
    gj.finalize()
    print(f"PASS {name}", flush=True)
