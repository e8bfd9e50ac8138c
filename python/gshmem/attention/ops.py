"""``ring_attention``: the public call, its checks, and the torch custom ops behind it.

Under torch.compile the forward and backward are ``torch.ops.gshmem.ring_attention`` and
``torch.ops.gshmem.ring_attention_backward`` (custom ops with registered autograd), which the
compiler keeps whole in its graphs; eager calls run the same functions through an
``autograd.Function``, which costs less host time per call. CUDA graphs capture either (every
transfer is stream-ordered; nothing waits on the host once a shape has been seen).
"""

from __future__ import annotations

import hashlib
import threading
import weakref

import torch
from torch import Tensor

from gshmem import Team, UsageError
from gshmem.attention import gather as gather_loops
from gshmem.attention import heads as heads_loops
from gshmem.attention import layout as layouts
from gshmem.attention import replay
from gshmem.attention import ring as ring_loops
from gshmem.attention.algorithm import choose
from gshmem.attention.gather_schedule import gathered_halves
from gshmem.attention.heads_schedule import chunk_count
from gshmem.attention.local import Dense, Varlen
from gshmem.attention.ring import Problem
from gshmem.attention.transport import Ring, resolve_backend
from gshmem.torch import comm_args, lookup_comm

DTYPES = (torch.bfloat16, torch.float16)
# A comm's rings live as long as the comm: they hold it only weakly, so dropping the comm
# releases them (the comm frees its symmetric memory itself at finalize).
_rings: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def ring_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    comm=None,
    team: Team | None = None,
    causal: bool = True,
    scale: float | None = None,
    layout: str = "zigzag",
    backend: str = "auto",
    algorithm: str = "auto",
    cu_seqlens: Tensor | None = None,
) -> Tensor:
    """Attention of this rank's query shard against the whole sequence, sharded over ``team``.

    Collective over ``team`` (default every PE of ``comm``; ``comm=None``: the default comm of
    gshmem.torch). ``q`` is ``[batch, heads, seq, dim]`` and ``k``/``v`` ``[batch, kv_heads,
    seq, dim]`` (``kv_heads`` divides ``heads``; only they travel), bf16 or fp16 on the comm's
    GPU, any strides; ``seq`` is this rank's shard in ``layout`` (gshmem.attention.layout:
    ``zigzag`` balances causal work, ``contiguous`` is plain chunks). ``cu_seqlens``: packed
    documents, the global int32 boundaries (batch 1, zigzag only, every document a multiple of
    2 x team size long); attention stays inside each document. Returns ``[batch, heads, seq,
    dim]`` in q's dtype; differentiable in q, k and v.

    Runs on torch's current stream and returns at once; transfers run on side streams and are
    joined back before the result is used. The first call with new shapes checks them across
    the team and may allocate symmetric buffers: both are collective and synchronise the host,
    so make it before capturing a CUDA graph. ``backend``: "gshmem" (copy-engine puts, zero
    SMs), "nccl" (``torch.distributed.batch_isend_irecv``; torch ranks must equal gshmem ranks)
    or "auto" (gshmem when the ring neighbours are reachable). ``algorithm``: "ring" (W steps,
    K/V passed around; two shards of K/V in flight), "allgather" (each rank gathers the K/V
    its queries see at once, while it computes its own block; three kernel calls whatever W
    is, up to W-1 shards of K/V held; dense inputs with an even shard), "heads" (an
    all-to-all gives each rank the whole sequence of heads/W heads, one kernel call per pass,
    another all-to-all brings the outputs back; both head counts must divide by W; Q/K/V of
    those heads and their output held for the backward; dense inputs) or "auto" (allgather
    while that K/V is small, else the ring; ``GSHMEM_ATTENTION_ALGORITHM`` may name one,
    read when a shape is first seen). The same choice on every rank is checked.
    """
    handle, members = comm_args(comm, team)
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    args = (handle, members, causal, scale, layout, backend, algorithm, cu_seqlens)
    if torch.compiler.is_compiling():  # the custom op: opaque to the compiler
        return torch.ops.gshmem.ring_attention(q, k, v, *args)[0]
    return _RingAttention.apply(q, k, v, *args)  # eager: skips the custom op's dispatch cost


class _RingAttention(torch.autograd.Function):
    """The eager path: the same forward and backward as the custom ops below."""

    @staticmethod
    def forward(ctx, q, k, v, *args):
        out, lse, last, aux = _forward(q, k, v, *args)
        ctx.save_for_backward(q, k, v, out, lse, last, aux)
        ctx.args = args
        return out

    @staticmethod
    def backward(ctx, dout):
        grads = _backward_impl(dout, *ctx.saved_tensors, *ctx.args)
        return (*grads, *(None for _ in ctx.args))


def _check(q: Tensor, k: Tensor, v: Tensor, device: int, cu: Tensor | None, world: int) -> None:
    """Local checks of one call (shapes, dtypes, documents, then the device), each a UsageError
    that says what to change."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise UsageError(
                f"ring_attention: {name} must be [batch, heads, seq, dim], got {tuple(t.shape)}"
            )
        if t.dtype not in DTYPES:
            raise UsageError(f"ring_attention: {name} is {t.dtype}; use bfloat16 or float16")
    if k.shape != v.shape or k.dtype != q.dtype or v.dtype != q.dtype:
        raise UsageError("ring_attention: k and v must have one shape, and q's dtype")
    (b, hq, s, d), (bk, hk, sk, dk) = q.shape, k.shape
    if (b, s, d) != (bk, sk, dk) or hq % hk:
        raise UsageError(
            f"ring_attention: q {tuple(q.shape)} and k/v {tuple(k.shape)} must share batch, "
            "seq and dim, and kv heads must divide q heads"
        )
    if cu is not None:
        if b != 1:
            raise UsageError("ring_attention: packed documents (cu_seqlens) need batch 1")
        if cu.dtype != torch.int32 or cu.dim() != 1:
            raise UsageError("ring_attention: cu_seqlens must be a 1-D int32 tensor")
        layouts.token_index(s * world, world, 0, "zigzag", cu)  # boundaries and divisibility
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.device != torch.device("cuda", device):
            raise UsageError(
                f"ring_attention: {name} is on {t.device}; the comm's GPU is cuda:{device}"
            )


def _ring(comm, members: list[int], backend: str) -> Ring:
    start, stride, size = members
    world = [start + i * stride for i in range(size)]
    if comm.rank not in world:
        raise UsageError(f"ring_attention: PE {comm.rank} is not a member of the team {world}")
    with _lock:
        rings = _rings.setdefault(comm, {})
        key = (tuple(members), backend)
        if key not in rings:
            team = Team(start, stride, size, world.index(comm.rank))
            rings[key] = Ring(weakref.proxy(comm), team, resolve_backend(comm, world, backend))
        return rings[key]


def _agree(ring: Ring, signature: tuple) -> None:
    """Collective: every member called with the same problem (a UsageError where not)."""
    digest = hashlib.blake2b(repr(signature).encode(), digest_size=7).digest()
    mine = torch.tensor([int.from_bytes(digest, "little")], device=f"cuda:{ring.comm.device}")
    seen = ring.comm.all_gather(mine, team=ring.team).cpu().tolist()
    if len({tuple(x) for x in seen}) != 1:
        raise UsageError(
            "ring_attention: the team's ranks called with different problems (shapes, dtype, "
            f"mask, layout or documents); this rank's is {signature}"
        )


def _problem(q, k, v, handle, members, causal, scale, layout, backend, algorithm, cu):
    """(ring, problem) of one call; the checks run once per new local signature (and the
    collective agreement with them), later calls with it only look it up."""
    comm = lookup_comm(handle)
    ring = _ring(comm, members, backend)
    docs = None if cu is None else tuple(int(x) for x in cu.tolist())
    seq_major = heads_loops.is_seq_major(q, k, v)  # how the head-parallel schedule lays data
    shared = (q.shape, k.shape, v.shape, q.dtype, k.dtype, v.dtype, causal, scale, layout, docs)
    key = (*shared, algorithm, seq_major, q.device, k.device, v.device)
    known = ring.problems.get(key)
    if known is not None:
        return ring, known, key
    layouts.check_layout(layout)
    _check(q, k, v, comm.device, cu, ring.world)
    seq = q.shape[2]
    if layout == "zigzag" and seq % 2:
        raise UsageError(f"ring_attention: the zigzag layout needs an even local length, got {seq}")
    algo = _choose(algorithm, ring.world, q, k, cu is not None)
    seq_major = seq_major and algo == "heads"
    chunks = chunk_count(ring.world, k.shape[1]) if algo == "heads" else 1
    _agree(ring, (tuple(q.shape), tuple(k.shape), str(q.dtype), causal, scale, layout, docs,
                  algo, seq_major, chunks))  # fmt: skip
    if cu is None:
        p = Problem(causal, scale, layout, Dense("cuda"), gather=algo == "allgather",
                    heads=algo == "heads", seq_major=seq_major, chunks=chunks)  # fmt: skip
    else:
        part = torch.tensor(docs, dtype=torch.int32) // (2 * ring.world)
        longest = int((part[1:] - part[:-1]).max())
        p = Problem(causal, scale, layout, Varlen("cuda", part.to(q.device), longest), split=True)
    ring.problems[key] = p
    return ring, p, key


def _choose(algorithm: str, world: int, q: Tensor, k: Tensor, varlen: bool) -> str:
    return choose(algorithm, world, q.shape[2], varlen, 2 * k.numel() * k.element_size(),
                  heads=(q.shape[1], k.shape[1]))  # fmt: skip


def _loops(p: Problem):
    """The module whose forward and backward run ``p``."""
    return heads_loops if p.heads else gather_loops if p.gather else ring_loops


def _to_kernel(t: Tensor, varlen: bool) -> Tensor:
    return t[0].transpose(0, 1).contiguous() if varlen else t


def _from_kernel(t: Tensor, varlen: bool) -> Tensor:
    return t.transpose(0, 1).unsqueeze(0) if varlen else t


@torch.library.custom_op("gshmem::ring_attention", mutates_args=())
def ring_attention_op(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    comm: int,
    team: list[int],
    causal: bool,
    scale: float,
    layout: str,
    backend: str,
    algorithm: str,
    cu_seqlens: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(output, fp32 lse, the K/V the backward starts from: the ring's last shard, or the
    all-gather's gathered K/V, or the head-parallel schedule's gathered Q/K/V; and the
    head-parallel schedule's whole-sequence output, empty otherwise)."""
    return _forward(q, k, v, comm, team, causal, scale, layout, backend, algorithm, cu_seqlens)


def _forward(q, k, v, comm, team, causal, scale, layout, backend, algorithm, cu_seqlens):
    ring, p, key = _problem(
        q, k, v, comm, team, causal, scale, layout, backend, algorithm, cu_seqlens
    )
    vl = cu_seqlens is not None

    def call(q, k, v):
        out, lse, last, *aux = _loops(p).forward(ring, p, *(_to_kernel(t, vl) for t in (q, k, v)))
        return _from_kernel(out, vl).contiguous(), lse, last, aux[0] if aux else q.new_empty(0)

    return _run(ring, ("forward", key), q, call, (q, k, v))


def _run(ring: Ring, key: tuple, q: Tensor, call, inputs: tuple):
    """``call(*inputs)``, replayed as a CUDA graph where replay.py's policy says so for ``q``."""
    if replay.wanted(ring.backend, q.numel(), torch.cuda.is_current_stream_capturing()):
        return replay.run(ring.replays, key, call, inputs)
    return call(*inputs)


@ring_attention_op.register_fake
def _(q, k, v, comm, team, causal, scale, layout, backend, algorithm, cu_seqlens):
    lse_shape = (q.shape[2], q.shape[1], 1) if cu_seqlens is not None else (*q.shape[:3], 1)
    last = k.numel() + v.numel() if team[2] > 1 else 0
    aux = q.new_empty(0)
    algo = _choose(algorithm, team[2], q, k, cu_seqlens is not None)
    if algo == "allgather":
        start, stride, _ = team
        index = (lookup_comm(comm).rank - start) // stride
        last = gathered_halves(index, team[2], layout, causal) * k.numel()
    elif algo == "heads":
        b, h, s, d = q.shape[0], q.shape[1] // team[2], q.shape[2] * team[2], q.shape[3]
        lse_shape, last = (b, h, s, 1), q.numel() + 2 * k.numel()
        aux = heads_loops.empty_in_layout(q, (b, h, s, d), heads_loops.is_seq_major(q, k, v))
    return (
        torch.empty_like(q, memory_format=torch.contiguous_format),
        q.new_empty(lse_shape, dtype=torch.float32),
        k.new_empty(last),
        aux,
    )


@torch.library.custom_op("gshmem::ring_attention_backward", mutates_args=())
def ring_attention_backward_op(
    dout: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    last: Tensor,
    aux: Tensor,
    comm: int,
    team: list[int],
    causal: bool,
    scale: float,
    layout: str,
    backend: str,
    algorithm: str,
    cu_seqlens: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor]:
    return _backward_impl(dout, q, k, v, out, lse, last, aux, comm, team, causal, scale, layout,
                          backend, algorithm, cu_seqlens)  # fmt: skip


def _backward_impl(
    dout, q, k, v, out, lse, last, aux, comm, team, causal, scale, layout, backend, algorithm,
    cu_seqlens,
):  # fmt: skip
    ring, p, key = _problem(
        q, k, v, comm, team, causal, scale, layout, backend, algorithm, cu_seqlens
    )
    vl = cu_seqlens is not None

    def call(dout, q, k, v, out, lse, last, aux):
        args = [_to_kernel(t, vl) for t in (dout.contiguous(), q, k, v, out)]
        grads = _loops(p).backward(ring, p, *args, lse, last, *((aux,) if p.heads else ()))
        return tuple(_from_kernel(g, vl).contiguous() for g in grads)

    return _run(ring, ("backward", key), q, call, (dout, q, k, v, out, lse, last, aux))


@ring_attention_backward_op.register_fake
def _(dout, q, k, v, out, lse, last, aux, comm, team, causal, scale, layout, backend, algorithm,
      cu_seqlens):  # fmt: skip
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup_context(ctx, inputs, output) -> None:
    q, k, v, *args, cu = inputs
    ctx.save_for_backward(q, k, v, *output)
    ctx.args, ctx.cu = args, cu


def _backward(ctx, dout, _dlse, _dlast, _daux):
    dq, dk, dv = torch.ops.gshmem.ring_attention_backward(
        dout, *ctx.saved_tensors, *ctx.args, ctx.cu
    )
    return dq, dk, dv, *(None for _ in range(8))


ring_attention_op.register_autograd(_backward, setup_context=_setup_context)


__all__ = ["ring_attention"]
