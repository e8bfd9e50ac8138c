"""gshmem.jax.ops.FfiWire's contiguous transfers written with jax.lax (their reference
semantics), which the CPU tests swap in for the GPU custom calls (``ops.wire``, through
``use_lax_wire``), and the CPU devices those tests' meshes need."""

from __future__ import annotations

import jax
import pytest


def need_cpu_devices(n: int = 4) -> None:
    """Asks jax for ``n`` CPU devices (only possible before its backend starts: another test
    module may have started it with as many already); skips the calling module otherwise."""
    try:
        jax.config.update("jax_num_cpu_devices", n)
    except RuntimeError:  # the backend is up already
        pass
    if len(jax.devices("cpu")) < n:
        pytest.skip(f"needs {n} CPU devices for the mesh", allow_module_level=True)


class LaxWire:
    """The transfers, each counted in ``calls`` (at trace time) so a test can tell that gshmem's
    path ran rather than the backend rule's fallback to jax.lax."""

    def __init__(self) -> None:
        self.calls = 0

    def permute(self, x, ax, pairs):
        self.calls += 1
        return jax.lax.ppermute(x, ax.name, pairs)

    def permute_start(self, x, ax, pairs, channel):
        self.calls += 1
        return jax.lax.ppermute(x, ax.name, pairs), jax.numpy.zeros((1,), "int32")

    def permute_done(self, received, keep, channel):
        return received

    def all_reduce(self, x, ax, team):
        self.calls += 1
        return jax.lax.psum(x, ax.name)

    def all_gather(self, x, ax, team):
        self.calls += 1
        return jax.lax.all_gather(x, ax.name)

    def reduce_scatter(self, x, ax, team):
        self.calls += 1
        return jax.lax.psum_scatter(x, ax.name)

    def all_to_all(self, x, ax, team):
        self.calls += 1
        return jax.lax.all_to_all(x, ax.name, 0, 0, tiled=True)


def as_initialised(monkeypatch, mesh) -> None:
    """For the calling test: gshmem.jax as if initialised with one PE per device of ``mesh`` (in
    the mesh's order), the backend rule at its defaults (no GSHMEM_JAX_* override from the
    environment); the transfers stay gshmem's custom calls (lowering only)."""
    import os

    from gshmem.jax import runtime

    pe_of = {d.id: i for i, d in enumerate(mesh.devices.flat)}
    monkeypatch.setattr(runtime, "_state", runtime.State([], [], pe_of, mesh.size, 0))
    for var in [v for v in os.environ if v.startswith("GSHMEM_JAX_")]:
        monkeypatch.delenv(var)


def use_lax_wire(monkeypatch, mesh) -> LaxWire:
    """``as_initialised``, with the transfers through a new ``LaxWire`` (returned)."""
    from gshmem.jax import ops

    as_initialised(monkeypatch, mesh)
    wire = LaxWire()
    monkeypatch.setattr(ops, "wire", wire)
    return wire
