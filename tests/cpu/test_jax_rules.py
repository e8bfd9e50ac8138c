"""gshmem.jax's pure rules: mesh groups and the handlers' tables, the backend choice, the
permutation checks (no jax needed beyond numpy)."""

from __future__ import annotations

import numpy as np
import pytest

from gshmem._errors import UsageError
from gshmem.jax.mesh import axis_groups, permute_table, team_table
from gshmem.jax.rules import DEFAULT_MAX_BYTES, check_perm, choose, inverse

IDS = np.array([[0, 1, 2, 3], [4, 5, 6, 7]])  # mesh ("dp", "cp")


def test_axis_groups_follow_axis_index_order() -> None:
    assert axis_groups(IDS, ("dp", "cp"), ("cp",)) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert axis_groups(IDS, ("dp", "cp"), ("dp",)) == [[0, 4], [1, 5], [2, 6], [3, 7]]
    # several axes: row-major over the names as given (jax.lax.axis_index order)
    assert axis_groups(IDS, ("dp", "cp"), ("dp", "cp")) == [[0, 1, 2, 3, 4, 5, 6, 7]]
    assert axis_groups(IDS, ("dp", "cp"), ("cp", "dp")) == [[0, 4, 1, 5, 2, 6, 3, 7]]
    with pytest.raises(UsageError, match="'tp' is not in the mesh"):
        axis_groups(IDS, ("dp", "cp"), ("tp",))
    with pytest.raises(UsageError, match="repeat"):
        axis_groups(IDS, ("dp", "cp"), ("cp", "cp"))


def test_permute_table_per_pe() -> None:
    pe_of = {d: 7 - d for d in range(8)}  # PEs numbered against the device ids
    groups = axis_groups(IDS, ("dp", "cp"), ("cp",))
    ring = [(i, (i + 1) % 4) for i in range(4)]
    t = permute_table(groups, ring, pe_of, 8)
    for group in groups:
        for i, dev in enumerate(group):
            pe = pe_of[dev]
            assert t[2 * pe] == pe_of[group[(i + 1) % 4]]
            assert t[2 * pe + 1] == pe_of[group[(i - 1) % 4]]
    # a partial permutation: nobody sends to index 0, index 3 sends nowhere
    t = permute_table(groups, [(0, 1), (1, 2), (2, 3)], {d: d for d in range(8)}, 8)
    assert list(t[:8]) == [1, -1, 2, 0, 3, 1, -1, 2]
    with pytest.raises(UsageError, match="no gshmem PE"):
        permute_table(groups, ring, {0: 0}, 8)


def test_team_table_strided_or_none() -> None:
    groups = axis_groups(IDS, ("dp", "cp"), ("dp",))
    t = team_table(groups, {d: d for d in range(8)}, 8).reshape(8, 3)
    assert t[1].tolist() == [1, 4, 2] and t[5].tolist() == [1, 4, 2] and t[3].tolist() == [3, 4, 2]
    # a mesh whose groups are not increasing strided PE sets: XLA's collective instead
    assert team_table([[0, 2, 1, 3]], {d: d for d in range(4)}, 4) is None
    assert team_table([[3, 2, 1, 0]], {d: d for d in range(4)}, 4) is None
    assert team_table([[5]], {5: 1}, 2).tolist() == [-1, -1, -1, 1, 1, 1]


def test_backend_rule_and_overrides() -> None:
    assert choose("ppermute", 1 << 30, {})[0] == "gshmem"
    assert choose("psum", DEFAULT_MAX_BYTES, {})[0] == "gshmem"
    backend, why = choose("psum", DEFAULT_MAX_BYTES + 1, {})
    assert backend == "xla" and "GSHMEM_JAX_MAX_BYTES" in why
    assert choose("psum", 2 << 20, {"GSHMEM_JAX_MAX_BYTES": "1M"})[0] == "xla"
    assert choose("ppermute", 8, {"GSHMEM_JAX_BACKEND": "xla"})[0] == "xla"
    env = {"GSHMEM_JAX_BACKEND": "xla", "GSHMEM_JAX_ALL_GATHER_BACKEND": "gshmem"}
    assert choose("all_gather", 1 << 30, env) == ("gshmem", "GSHMEM_JAX_ALL_GATHER_BACKEND=gshmem")
    assert choose("psum", 8, env)[0] == "xla"
    with pytest.raises(UsageError, match="one of"):
        choose("psum", 8, {"GSHMEM_JAX_BACKEND": "nccl"})
    with pytest.raises(UsageError, match="not a size"):
        choose("psum", 8, {"GSHMEM_JAX_MAX_BYTES": "lots"})
    with pytest.raises(UsageError, match="unknown op"):
        choose("pmax", 8, {})


def test_perm_checks_and_inverse() -> None:
    assert check_perm([(0, 1), (1, 0)], 2) == ((0, 1), (1, 0))
    with pytest.raises(UsageError, match="outside the axis"):
        check_perm([(0, 2)], 2)
    with pytest.raises(UsageError, match="destination appears twice"):
        check_perm([(0, 1), (1, 1)], 2)
    with pytest.raises(UsageError, match="source appears twice"):
        check_perm([(0, 1), (0, 0)], 2)
    with pytest.raises(UsageError, match="pairs"):
        check_perm([0, 1], 2)
    ring = [(i, (i + 1) % 5) for i in range(5)]
    back = dict(inverse(ring))
    assert all(back[d] == s for s, d in ring)


def test_permute_path(monkeypatch) -> None:
    """The C API's kernel up to GSHMEM_JAX_PPERMUTE_KERNEL_MAX (packets, bulk from
    GSHMEM_PERMUTE_BULK_MIN), the copy engine above it: direct in one process, else staged."""
    from gshmem.jax.rules import DEFAULT_KERNEL_MAX, permute_path

    monkeypatch.delenv("GSHMEM_PERMUTE_BULK_MIN", raising=False)
    assert permute_path(8, {}) == "packets"
    assert permute_path(6, {}) == "packets"  # any byte count: the packets carry 8-byte words
    assert permute_path(512 << 10, {}) == "bulk"
    assert permute_path((512 << 10) - 8, {}) == "packets"
    assert permute_path(DEFAULT_KERNEL_MAX, {}) == "bulk"
    assert permute_path(DEFAULT_KERNEL_MAX + 4, {}) == "copy engine"
    # one process driving every device: straight into the receiver's output, unless turned off
    assert permute_path(DEFAULT_KERNEL_MAX + 4, {}, one_process=True) == "copy engine direct"
    off = {"GSHMEM_JAX_PPERMUTE_DIRECT": "0"}
    assert permute_path(DEFAULT_KERNEL_MAX + 4, off, one_process=True) == "copy engine"
    assert permute_path(8, {}, one_process=True) == "packets"  # the kernel's sizes stay
    with pytest.raises(UsageError, match="GSHMEM_JAX_PPERMUTE_DIRECT='yes'; 0 or 1"):
        permute_path(32 << 20, {"GSHMEM_JAX_PPERMUTE_DIRECT": "yes"}, one_process=True)
    assert permute_path(0, {}) == "copy engine"
    assert permute_path(4096, {"GSHMEM_JAX_PPERMUTE_KERNEL_MAX": "1K"}) == "copy engine"
    assert permute_path(512, {"GSHMEM_JAX_PPERMUTE_KERNEL_MAX": "1K"}) == "packets"
    monkeypatch.setenv("GSHMEM_PERMUTE_BULK_MIN", "never")
    assert permute_path(1 << 20, {"GSHMEM_JAX_PPERMUTE_KERNEL_MAX": "2M"}) == "packets"
