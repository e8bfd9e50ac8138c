"""gshmem.jax's communication ops, with jax.lax's signatures, for use inside ``jax.jit`` +
``shard_map``: each one is a layout step in JAX (moving the operated dimension to the front),
the contiguous transfer (a gshmem FFI custom call, or XLA's collective when the rule in
rules.py says so) and the layout back. Every op is linear; its gradient is its transpose
(ppermute: the inverse permutation; psum: psum; all_gather <-> psum_scatter; all_to_all with
split and concat axes swapped).

The ops need the device mesh to map mesh positions to gshmem PEs: the mesh set by
``jax.set_mesh`` (or ``with mesh:``), or ``mesh=``. Ordering: on each device an op runs in
XLA's stream order with the program's other work; every device must run the same ops in the
same order (as any SPMD program does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gshmem._errors import UsageError
from gshmem.jax import runtime
from gshmem.jax.mesh import axis_groups, permute_table, team_table
from gshmem.jax.rules import check_perm, choose, inverse, permute_path

GSHMEM_DTYPES = ("float32", "bfloat16", "float16", "int32", "int64")


@dataclass(frozen=True)
class Axis:
    """The mesh axes an op runs over, with their device groups (mesh.py)."""

    name: Any  # as the caller gave it (a name or a tuple of names)
    groups: list[list[int]]

    @property
    def size(self) -> int:
        return len(self.groups[0])

    def team(self) -> np.ndarray | None:
        st = runtime.state()
        return team_table(self.groups, st.pe_of, st.npes)

    def peers(self, pairs) -> np.ndarray:
        st = runtime.state()
        return permute_table(self.groups, pairs, st.pe_of, st.npes)


def _mesh(mesh: Any) -> Any:
    if mesh is not None:
        return mesh
    from jax._src import mesh as mesh_lib

    found = mesh_lib.get_concrete_mesh()
    if found is None or found.empty:
        raise UsageError(
            "gshmem.jax ops need the device mesh: run under jax.set_mesh(mesh) (or `with mesh:`), "
            "or pass mesh="
        )
    return found


def _axis(axis_name: Any, mesh: Any) -> Axis:
    m = _mesh(mesh)
    names = tuple(axis_name) if isinstance(axis_name, (tuple, list)) else (axis_name,)
    return Axis(axis_name, axis_groups(m.device_ids, tuple(m.axis_names), names))


def _nbytes(x: Any) -> int:
    return int(np.prod(x.shape, dtype=np.int64)) * x.dtype.itemsize


def _permute_path(nbytes: int) -> str:
    import jax

    return permute_path(nbytes, one_process=jax.process_count() == 1)


def _ffi(target: str, shape: tuple[int, ...], x: Any, **attrs: Any) -> Any:
    import jax

    return jax.ffi.ffi_call(target, jax.ShapeDtypeStruct(shape, x.dtype))(x, **attrs)


class FfiWire:
    """The contiguous transfers as gshmem custom calls (on x's leading dimension)."""

    def permute(self, x, ax: Axis, pairs):
        path = _permute_path(_nbytes(x))
        if path == "copy engine direct":
            return _ffi("gshmem_ppermute_direct", x.shape, x, peers=ax.peers(pairs))
        kernel = path != "copy engine"
        return _ffi("gshmem_ppermute", x.shape, x, peers=ax.peers(pairs), kernel=np.int32(kernel))

    def permute_start(self, x, ax: Axis, pairs, channel: int):
        """(received, token): token is a dataless int32[1] to order later work after the start."""
        import jax

        # No side effect declared: done consumes start's results and its own result is used,
        # and jax.checkpoint refuses effects (the models remat their layers).
        start = jax.ffi.ffi_call("gshmem_ppermute_start",
                                 (jax.ShapeDtypeStruct(x.shape, x.dtype),
                                  jax.ShapeDtypeStruct((1,), np.int32)))  # fmt: skip
        return tuple(start(x, peers=ax.peers(pairs), channel=np.int32(channel)))

    def permute_done(self, received, keep, channel: int):
        import jax

        done = jax.ffi.ffi_call("gshmem_ppermute_done",
                                jax.ShapeDtypeStruct(received.shape, received.dtype),
                                input_output_aliases={0: 0})  # fmt: skip
        return done(received, *keep, channel=np.int32(channel))

    def all_reduce(self, x, ax: Axis, team):
        return _ffi("gshmem_all_reduce", x.shape, x, groups=team)

    def all_gather(self, x, ax: Axis, team):
        return _ffi("gshmem_all_gather", (ax.size, *x.shape), x, groups=team)

    def reduce_scatter(self, x, ax: Axis, team):  # x: [size, *out]
        return _ffi("gshmem_reduce_scatter", x.shape[1:], x, groups=team)

    def all_to_all(self, x, ax: Axis, team):  # x: [size, ...]: row m goes to member m
        return _ffi("gshmem_all_to_all", x.shape, x, groups=team)


wire: Any = FfiWire()  # the tests swap in jax.lax's contiguous equivalents to check the layouts


def _linear(f, transpose):
    """``f`` with ``transpose`` as its vector-Jacobian product (f is linear)."""
    import jax

    g = jax.custom_vjp(f)
    g.defvjp(lambda x: (f(x), None), lambda _, ct: (transpose(ct),))
    return g


def _team_or_none(op: str, x: Any, ax: Axis) -> np.ndarray | None:
    """The team table when ``op`` on ``x`` runs on gshmem, else None (XLA's collective)."""
    if choose(op, _nbytes(x))[0] != "gshmem" or str(x.dtype) not in GSHMEM_DTYPES:
        return None
    return ax.team()


def ppermute(x: Any, axis_name: Any, perm, *, mesh: Any = None) -> Any:
    """Collective over ``axis_name`` (every device runs the same gshmem.jax ops in the same order;
    each runs in XLA's stream order). jax.lax.ppermute on gshmem: device i of every group along
    ``axis_name`` sends its ``x`` to device j for each (i, j) in ``perm``; devices nobody sends
    to get zeros. Up to GSHMEM_JAX_PPERMUTE_KERNEL_MAX (16M) one kernel stores straight into the
    receiver's output; above it copy-engine puts (no SMs): straight into the receiver's output
    where one process drives every device, else through a symmetric staging slot
    (GSHMEM_JAX_SLOT_BYTES, in chunks of half of it) and a local copy out. ``explain`` says
    which (rules.permute_path)."""
    import jax

    ax = _axis(axis_name, mesh)
    pairs = check_perm(perm, ax.size)

    def one(a):
        if choose("ppermute", _nbytes(a))[0] == "xla":
            return jax.lax.ppermute(a, axis_name, pairs)

        def send(p):
            return lambda y: wire.permute(y, ax, p)

        return _linear(send(pairs), send(inverse(pairs)))(a)

    return jax.tree.map(one, x)


def psum(x: Any, axis_name: Any, *, mesh: Any = None) -> Any:
    """Collective over ``axis_name``, in XLA's stream order (as ``ppermute``). jax.lax.psum: on
    gshmem up to GSHMEM_JAX_MAX_BYTES per device, XLA's above (rules.py)."""
    import jax

    ax = _axis(axis_name, mesh)

    def one(a):
        team = _team_or_none("psum", a, ax)
        if team is None:
            return jax.lax.psum(a, axis_name)

        def f(y):
            return wire.all_reduce(y, ax, team)

        return _linear(f, f)(a)

    return jax.tree.map(one, x)


def all_gather(
    x: Any, axis_name: Any, *, axis: int = 0, tiled: bool = False, mesh: Any = None
) -> Any:
    """Collective over ``axis_name``, in XLA's stream order (as ``ppermute``).
    jax.lax.all_gather: every member's ``x`` stacked (or, ``tiled``, concatenated) along
    ``axis`` in member order."""
    import jax
    import jax.numpy as jnp

    ax = _axis(axis_name, mesh)
    axis = axis % (x.ndim + (0 if tiled else 1))
    team = _team_or_none("all_gather", x, ax)
    if team is None:
        return jax.lax.all_gather(x, axis_name, axis=axis, tiled=tiled)

    def f(y):
        g = jnp.moveaxis(wire.all_gather(y, ax, team), 0, axis)
        return g.reshape(*y.shape[:axis], -1, *y.shape[axis + 1 :]) if tiled else g

    return _linear(f, lambda ct: psum_scatter(ct, axis_name, scatter_dimension=axis, tiled=tiled,
                                              mesh=mesh))(x)  # fmt: skip


def psum_scatter(x: Any, axis_name: Any, *, scatter_dimension: int = 0, tiled: bool = False,
                 mesh: Any = None) -> Any:  # fmt: skip
    """Collective over ``axis_name``, in XLA's stream order (as ``ppermute``).
    jax.lax.psum_scatter: the sum over members, member m keeping block m of
    ``scatter_dimension`` (of size = members unless ``tiled``, then divisible by it)."""
    import jax
    import jax.numpy as jnp

    ax = _axis(axis_name, mesh)
    d = scatter_dimension % x.ndim
    n, length = ax.size, x.shape[d]
    if (length != n) if not tiled else (length % n):
        raise UsageError(f"psum_scatter: dimension {d} has {length} elements; needs "
                         f"{'a multiple of ' if tiled else ''}{n} (the axis size)")  # fmt: skip
    team = _team_or_none("psum_scatter", x, ax)
    if team is None:
        return jax.lax.psum_scatter(x, axis_name, scatter_dimension=d, tiled=tiled)

    def f(y):
        front = jnp.moveaxis(y, d, 0)
        out = wire.reduce_scatter(front.reshape(n, length // n, *front.shape[1:]), ax, team)
        return jnp.moveaxis(out, 0, d) if tiled else out[0]

    return _linear(f, lambda ct: all_gather(ct, axis_name, axis=d, tiled=tiled, mesh=mesh))(x)


def all_to_all(x: Any, axis_name: Any, split_axis: int, concat_axis: int, *, tiled: bool = False,
               mesh: Any = None) -> Any:  # fmt: skip
    """Collective over ``axis_name``, in XLA's stream order (as ``ppermute``).
    jax.lax.all_to_all: ``x`` split along ``split_axis`` into one block per member, block m
    sent to member m, the received blocks stacked (or, ``tiled``, concatenated) along
    ``concat_axis`` in member order."""
    import jax
    import jax.numpy as jnp

    ax = _axis(axis_name, mesh)
    s, n = split_axis % x.ndim, ax.size
    length = x.shape[s]
    if (length != n) if not tiled else (length % n):
        raise UsageError(f"all_to_all: split axis {s} has {length} elements; needs "
                         f"{'a multiple of ' if tiled else ''}{n} (the axis size)")  # fmt: skip
    c = concat_axis % x.ndim
    team = _team_or_none("all_to_all", x, ax)
    if team is None:
        return jax.lax.all_to_all(x, axis_name, s, c, tiled=tiled)

    def f(y):
        front = jnp.moveaxis(y, s, 0)
        if not tiled:  # blocks drop the split axis; stacked at concat_axis
            return jnp.moveaxis(wire.all_to_all(front, ax, team), 0, c)
        got = wire.all_to_all(front.reshape(n, length // n, *front.shape[1:]), ax, team)
        blocks = jnp.moveaxis(got, 1, s + 1)  # [source, *block shape]
        out = jnp.moveaxis(blocks, 0, c)
        return out.reshape(*out.shape[:c], -1, *out.shape[c + 2 :])

    return _linear(f, lambda ct: all_to_all(ct, axis_name, c, s, tiled=tiled, mesh=mesh))(x)


def explain(op: str, x: Any, axis_name: Any = None, *, mesh: Any = None) -> str:
    """Which backend ``op`` would use for ``x`` (an array or a byte count) and why."""
    nbytes = x if isinstance(x, int) else _nbytes(x)
    backend, why = choose(op, nbytes)
    if backend == "gshmem" and op == "ppermute":
        return f"{op}: gshmem, {_permute_path(nbytes)} ({why})"
    if backend == "gshmem" and not isinstance(x, int) and op != "ppermute":
        if str(x.dtype) not in GSHMEM_DTYPES:
            return f"{op}: xla ({x.dtype} is not one of {GSHMEM_DTYPES})"
        if axis_name is not None and _axis(axis_name, mesh).team() is None:
            return f"{op}: xla (the axis groups are not strided sets of gshmem PEs)"
    return f"{op}: {backend} ({why})"


__all__ = ["all_gather", "all_to_all", "explain", "ppermute", "psum", "psum_scatter"]
