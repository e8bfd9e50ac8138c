"""From a JAX mesh to what the FFI handlers read: for a mesh axis (or several), the groups of
devices that communicate, and per gshmem PE its peers in a permutation or its group as a
strided team. Pure Python and numpy: the tables are computed at trace time and travel as the
custom calls' attributes, so a handler only indexes them by its own PE.

A device's *group* over axes ``names`` is the set of devices that differ from it only in those
axes, ordered by their index along them (row-major over ``names`` in the order given), which is
the order of ``jax.lax.axis_index(names)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from gshmem._errors import UsageError


def axis_groups(
    device_ids: np.ndarray, axis_names: Sequence[str], names: Sequence[str]
) -> list[list[int]]:
    """The device-id groups of a mesh (``device_ids``: its array of device ids, one dimension
    per entry of ``axis_names``) over the axes ``names``; each group in axis-index order."""
    names = tuple(names)
    for n in names:
        if n not in axis_names:
            raise UsageError(f"axis name {n!r} is not in the mesh (axes: {tuple(axis_names)})")
    if len(set(names)) != len(names):
        raise UsageError(f"axis names repeat: {names}")
    ids = np.asarray(device_ids)
    moved = [axis_names.index(n) for n in names]
    rest = [i for i in range(ids.ndim) if i not in moved]
    size = int(np.prod([ids.shape[i] for i in moved], dtype=np.int64))
    grouped = np.transpose(ids, rest + moved).reshape(-1, size)
    return [[int(d) for d in row] for row in grouped]


def _pe_table(pe_of: Mapping[int, int], group: list[int]) -> list[int]:
    try:
        return [pe_of[d] for d in group]
    except KeyError as e:
        raise UsageError(
            f"device {e.args[0]} of the mesh has no gshmem PE (gshmem.jax.init covers "
            "the devices it was initialised on)"
        ) from None


def permute_table(
    groups: list[list[int]], perm: Sequence[tuple[int, int]], pe_of: Mapping[int, int], npes: int
) -> np.ndarray:
    """int32 [2 * npes]: for PE p, entry 2p is the PE it sends to and 2p + 1 the PE it receives
    from (-1: none), applying ``perm`` ((source index, destination index) pairs) in every group."""
    table = np.full(2 * npes, -1, dtype=np.int32)
    for group in groups:
        pes = _pe_table(pe_of, group)
        for src, dst in perm:
            table[2 * pes[src]] = pes[dst]
            table[2 * pes[dst] + 1] = pes[src]
    return table


def team_table(groups: list[list[int]], pe_of: Mapping[int, int], npes: int) -> np.ndarray | None:
    """int32 [3 * npes]: for PE p, (start, stride, size) of its group as a strided team of world
    PEs in group order; None when a group is not an increasing arithmetic progression of PEs
    (gshmem teams are strided; such meshes use XLA's collective)."""
    table = np.full(3 * npes, -1, dtype=np.int32)
    for group in groups:
        pes = _pe_table(pe_of, group)
        stride = pes[1] - pes[0] if len(pes) > 1 else 1
        if stride < 1 or pes != [pes[0] + i * stride for i in range(len(pes))]:
            return None
        for p in pes:
            table[3 * p : 3 * p + 3] = (pes[0], stride, len(pes))
    return table


__all__ = ["axis_groups", "permute_table", "team_table"]
