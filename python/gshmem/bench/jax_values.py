"""The value check of ``python -m gshmem.bench jax``: before a size is timed, one call of the
gshmem op on a probe input is compared with a host reference, so a table row is never the speed
of a wrong answer (the timed chains start from values every call leaves alone: ones, for psum
zeros).

The probe's element i (of the global array) is i mod PERIOD, a whole number: a block that lands
on the wrong device shows, and a psum of a few such numbers is exact in any order."""

from __future__ import annotations

from typing import Any

import numpy as np

PERIOD = 8191  # a prime: no power-of-two block length is a multiple of it


def probe(mesh: Any, count: int) -> Any:
    """[devices * count] float32 sharded over ``mesh``'s one axis, element i = i mod PERIOD."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    n = mesh.devices.size
    axis = mesh.axis_names[0]

    def part(index: tuple[slice, ...]) -> np.ndarray:
        lo, hi, _ = index[0].indices(n * count)
        return (np.arange(lo, hi) % PERIOD).astype(np.float32)

    sharding = NamedSharding(mesh, PartitionSpec(axis))
    return jax.make_array_from_callback((n * count,), sharding, part)


def expected(op: str, devices: int, count: int, block: int) -> np.ndarray:
    """Device ``block``'s part of one call of ``op`` on the probe: ``ppermute`` along the ring
    i -> i + 1 (it receives block - 1's part), ``psum`` the sum of every device's part (exact in
    float32 below 2**24)."""

    def part(d: int) -> np.ndarray:
        return np.arange(d * count, (d + 1) * count, dtype=np.int64) % PERIOD

    if op == "ppermute":
        return part((block - 1) % devices).astype(np.float32)
    if op == "psum":
        return sum(part(d) for d in range(devices)).astype(np.float64)
    raise ValueError(f"no reference for {op!r}")


def wrong_blocks(op: str, out: Any, devices: int, count: int) -> list[int]:
    """The blocks among this process's shards of ``out`` (one call of ``op`` on the probe) that
    differ from the reference: ppermute bit for bit, psum within float32 rounding."""
    wrong = []
    total = expected(op, devices, count, 0) if op == "psum" else None  # every device's psum
    for shard in out.addressable_shards:
        block = (shard.index[0].start or 0) // count
        want = expected(op, devices, count, block) if total is None else total
        got = np.asarray(shard.data)
        same = np.array_equal(got, want) if op == "ppermute" else np.allclose(got, want, 1e-6, 0)
        if not same:
            wrong.append(block)
    return wrong


__all__ = ["PERIOD", "expected", "probe", "wrong_blocks"]
