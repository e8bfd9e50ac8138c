"""CPU tests of the collectives' backend choice (src/coll/select.cpp, docs/collectives.md
"Backend choice") and of the NCCL loader failing (or succeeding, with a stub library) cleanly."""

from __future__ import annotations

import ctypes
import shutil
import subprocess

import pytest

import gshmem
from gshmem import _C, coll_select
from gshmem.coll_select import choose

KiB, MiB = 1024, 1 << 20
OPS = coll_select.OPS
SIZES = [0, 8, 8 * KiB, 64 * KiB, 64 * KiB + 1, 256 * KiB, 256 * KiB + 1, MiB, 8 * MiB,
         8 * MiB + 1, 16 * MiB, 16 * MiB + 1, 32 * MiB, 32 * MiB + 1, 64 * MiB, 64 * MiB + 1,
         256 * MiB, 256 * MiB + 1, 1 << 30]  # fmt: skip


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    import os

    for k in list(os.environ):
        if k.startswith("GSHMEM_COLL_") or k.startswith("GSHMEM_NCCL"):
            monkeypatch.delenv(k)
    monkeypatch.delenv("GSHMEM_DEBUG", raising=False)


def test_ops_are_the_c_enum():
    assert OPS == ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all",
                   "all_to_allv", "barrier")  # fmt: skip
    assert [coll_select.op_code(o) for o in OPS] == list(range(7))
    assert coll_select.op_code("All-Reduce") == 0
    with pytest.raises(gshmem.UsageError, match="all_reduce"):
        coll_select.op_code("allreduce")


def all_reduce_by_size(npes: int, pulled: bool) -> dict[int, str]:
    """The measured table's all_reduce algorithm by size: one-shot to 1 MiB of traffic below 4
    PEs, to 256 KiB at 4 where the two-shot pulls its inputs and 512 KiB where it pushes them;
    packets to 256 KiB of traffic below 4 PEs, 64 KiB at 4."""
    one_max = {2: MiB, 3: 512 * KiB, 4: 256 * KiB if pulled else 512 * KiB}[npes]
    packet_max = {2: 256 * KiB, 3: 128 * KiB, 4: 64 * KiB}[npes]
    return {8: "packet", packet_max: "packet", packet_max + 1: "one_shot",
            one_max: "one_shot", one_max + 1: "two_shot", 4 * MiB: "two_shot",
            8 * MiB: "two_shot"}  # fmt: skip


@pytest.mark.parametrize("npes", [2, 3, 4])
def test_all_reduce_by_size(npes):
    both = {"symmetric": True, "symmetric_input": True}
    for size, algo in all_reduce_by_size(npes, pulled=True).items():
        want = ("gshmem", algo + (" pull" if algo == "two_shot" else ""))
        assert choose("all_reduce", size, npes, True, **both)[:2] == want, size
    for size, algo in all_reduce_by_size(npes, pulled=False).items():
        assert choose("all_reduce", size, npes, True, symmetric=True)[:2] == ("gshmem", algo)
        # a staged output leaves gshmem above the staged NCCL threshold (256 KiB)
        staged = ("gshmem", algo) if size <= 256 * KiB else ("nccl", "nccl")
        assert choose("all_reduce", size, npes, True)[:2] == staged, size
        assert choose("all_reduce", size, npes, False)[:2] == ("gshmem", algo), size
    assert choose("all_reduce", 8 * MiB + 1, npes, True, symmetric=True)[:2] == ("nccl", "nccl")
    assert choose("all_reduce", 1 << 30, npes, True, symmetric=True)[:2] == ("nccl", "nccl")
    # without NCCL the one-sided path takes every size, and says NCCL would have been used
    b, a, why = choose("all_reduce", 1 << 30, npes, False)
    assert (b, a) == ("gshmem", "two_shot") and "NCCL is not enabled" in why


def test_thresholds_shrink_beyond_the_anchors_pe_count():
    assert choose("all_reduce", 28 * KiB, 8, False)[1] == "one_shot"  # 64 KiB * 3/7 -> 27 KiB
    assert choose("all_reduce", 27 * KiB, 8, False)[1] == "packet"
    both = {"symmetric": True, "symmetric_input": True}
    assert choose("all_reduce", 109 * KiB, 8, False, **both)[1] == "one_shot"  # 256 KiB * 3/7
    assert choose("all_reduce", 110 * KiB, 8, False, **both)[1] == "two_shot pull"
    assert choose("all_reduce", 219 * KiB, 8, False)[1] == "one_shot"  # pushed: 512 KiB * 3/7
    assert choose("all_reduce", 220 * KiB, 8, False)[1] == "two_shot"
    assert choose("all_reduce", 128 * KiB + 1, 3, False)[1] == "one_shot"  # grown below 4
    assert choose("all_gather", 64 * KiB + 1, 3, False)[1] == "one_shot"  # not grown below 4
    assert choose("all_gather", 28 * KiB, 8, False)[1] == "one_shot"  # every op's packet range
    assert choose("all_to_all", 109 * KiB, 8, False)[1] == "packet"  # 256 KiB * 3/7 -> 109 KiB
    assert choose("all_to_all", 110 * KiB, 8, False)[1] == "one_shot"
    assert choose("all_to_all", 110 * KiB, 4, False)[1] == "packet"
    assert choose("all_reduce", 1 << 30, 1, True)[:2] == ("nccl", "nccl")
    assert choose("all_reduce", MiB, 1, False)[1:] == ("one_shot", "one PE: a local copy")


# op: (packet_max, nccl_min with a symmetric output, nccl_min with a staged one) of the measured
# table, bytes of input per PE at 4 PEs (reduce_scatter always stages).
MOVING = {"all_gather": (64 * KiB, 64 * MiB, 8 * MiB),
          "reduce_scatter": (256 * KiB, 16 * MiB, 16 * MiB),
          "all_to_all": (256 * KiB, 256 * MiB, 32 * MiB)}  # fmt: skip


@pytest.mark.parametrize("op", list(MOVING))
@pytest.mark.parametrize("npes", [2, 4])
@pytest.mark.parametrize("symmetric", [False, True])
def test_data_movement_ops(op, npes, symmetric):
    packet_max, direct_min, staged_min = MOVING[op]
    nccl_min = direct_min if symmetric else staged_min
    for size in SIZES:
        backend, algo, _ = choose(op, size, npes, True, symmetric)
        small = "packet" if size <= packet_max else "one_shot"
        assert (backend, algo) == (("nccl", "nccl") if size > nccl_min else ("gshmem", small))
        assert choose(op, size, npes, False, symmetric)[:2] == ("gshmem", small)


def test_direct_min_decides_whether_a_symmetric_output_is_staged(monkeypatch):
    big = 32 * MiB  # above staged all_gather's NCCL threshold, below the direct one
    assert choose("all_gather", big, 4, True, symmetric=True)[0] == "gshmem"
    assert "for staged outputs" in choose("all_gather", big, 4, True)[2]
    monkeypatch.setenv("GSHMEM_COLL_DIRECT_MIN", "never")
    assert choose("all_gather", big, 4, True, symmetric=True)[0] == "nccl"
    monkeypatch.setenv("GSHMEM_COLL_DIRECT_MIN", "64M")
    assert choose("all_gather", big, 4, True, symmetric=True)[0] == "nccl"
    assert choose("all_to_all", 64 * MiB, 4, True, symmetric=True)[0] == "gshmem"
    monkeypatch.setenv("GSHMEM_COLL_DIRECT_MIN", "lots")
    with pytest.raises(gshmem.UsageError, match="GSHMEM_COLL_DIRECT_MIN"):
        choose("all_gather", big, 4, True, symmetric=True)


def test_pull_needs_symmetric_inputs_and_outputs(monkeypatch):
    """A two-shot all_reduce whose input and output are both symmetric reads the inputs in
    place ("two_shot pull") from GSHMEM_COLL_PULL_MIN (default: always); nothing else pulls."""
    both = {"symmetric": True, "symmetric_input": True}
    assert choose("all_reduce", MiB, 4, True, **both)[:2] == ("gshmem", "two_shot pull")
    assert choose("all_reduce", 2 * MiB, 2, False, **both)[:2] == ("gshmem", "two_shot pull")
    assert choose("all_reduce", MiB, 4, True, symmetric=True)[:2] == ("gshmem", "two_shot")
    assert choose("all_reduce", MiB, 4, False, symmetric_input=True)[:2] == ("gshmem", "two_shot")
    assert choose("all_reduce", 128 * KiB, 4, True, **both)[1] == "one_shot"  # two-shot only
    assert choose("all_reduce", 8 * KiB, 4, True, **both)[1] == "packet"
    assert choose("all_gather", 4 * MiB, 4, True, **both)[1] == "one_shot"  # all_reduce only
    # nor do other ops take the pulled NCCL threshold: reduce_scatter's is 16 MiB either way
    assert choose("reduce_scatter", 32 * MiB, 4, True, **both)[0] == "nccl"
    # NCCL's threshold for pulled calls: 64 MiB (8 MiB pushed)
    assert choose("all_reduce", 64 * MiB, 4, True, **both)[:2] == ("gshmem", "two_shot pull")
    b, a, why = choose("all_reduce", 64 * MiB + 1, 4, True, **both)
    assert (b, a) == ("nccl", "nccl") and "64 MiB for pulled inputs" in why, why
    assert choose("all_reduce", 16 * MiB, 4, True, symmetric=True)[:2] == ("nccl", "nccl")
    monkeypatch.setenv("GSHMEM_COLL_ALL_REDUCE_ALGO", "two_shot")  # an override pulls too
    assert choose("all_reduce", 8, 4, True, **both)[1] == "two_shot pull"
    monkeypatch.delenv("GSHMEM_COLL_ALL_REDUCE_ALGO")
    monkeypatch.setenv("GSHMEM_COLL_PULL_MIN", "2M")
    assert choose("all_reduce", MiB, 4, True, **both)[1] == "two_shot"
    assert choose("all_reduce", 2 * MiB, 4, True, **both)[1] == "two_shot pull"
    text = _C.coll_explain_query(0, 2 * MiB, 4, True, True, in_symmetric=True)
    assert text.startswith("all_reduce 2097152 B on 4 PEs: gshmem two_shot pull ("), text
    monkeypatch.setenv("GSHMEM_COLL_PULL_MIN", "never")
    assert choose("all_reduce", 8 * MiB, 4, True, **both)[1] == "two_shot"
    monkeypatch.setenv("GSHMEM_COLL_PULL_MIN", "lots")
    with pytest.raises(gshmem.UsageError, match="GSHMEM_COLL_PULL_MIN"):
        choose("all_reduce", MiB, 4, True, **both)


def test_permute_path(monkeypatch):
    """Large out-of-place permutes into symmetric outputs go by the copy engine; the rest by the
    kernel: bulk from GSHMEM_PERMUTE_BULK_MIN, packets below; each variable moves its line."""
    monkeypatch.delenv("GSHMEM_PERMUTE_COPY_MIN", raising=False)
    monkeypatch.delenv("GSHMEM_PERMUTE_BULK_MIN", raising=False)
    path = _C.permute_path
    assert path(16 * MiB, True) == "copy_engine"
    assert path(16 * MiB - 1, True) == "bulk"
    assert [path(b, True) for b in (512 * KiB - 1, 512 * KiB)] == ["packets", "bulk"]
    assert path(1 << 30, False) == "bulk"  # not symmetric: the receiver's address is unknown
    assert path(1 << 30, True, in_place=True) == "bulk"
    assert path(8, False) == path(8, True, in_place=True) == "packets"
    monkeypatch.setenv("GSHMEM_PERMUTE_COPY_MIN", "64K")
    assert [path(b, True) for b in (64 * KiB - 1, 64 * KiB)] == ["packets", "copy_engine"]
    monkeypatch.setenv("GSHMEM_PERMUTE_COPY_MIN", "0")
    assert path(1, True) == "copy_engine"
    monkeypatch.setenv("GSHMEM_PERMUTE_COPY_MIN", "Never")
    assert path(1 << 30, True) == "bulk"
    monkeypatch.setenv("GSHMEM_PERMUTE_BULK_MIN", "never")
    assert path(1 << 30, True) == path(1 << 30, False) == "packets"
    monkeypatch.setenv("GSHMEM_PERMUTE_BULK_MIN", "1")
    assert path(1, False) == "bulk"
    for var in ("GSHMEM_PERMUTE_COPY_MIN", "GSHMEM_PERMUTE_BULK_MIN"):
        monkeypatch.setenv(var, "lots")
        with pytest.raises(gshmem.UsageError, match=var):
            path(MiB, True)
        monkeypatch.delenv(var)
    # a comm with a proxy path: the copy engine (or the proxy) at every size, the variable unread
    # (a value it would refuse passes)
    monkeypatch.setenv("GSHMEM_PERMUTE_COPY_MIN", "lots")
    assert path(1, True, proxy=True) == "copy_engine"
    assert path(1, False, proxy=True) == path(1, True, in_place=True, proxy=True) == "packets"


@pytest.mark.parametrize("op", ["broadcast", "all_to_allv", "barrier"])
def test_always_one_sided(op):
    for size in SIZES:
        for npes in (2, 4, 8):
            assert choose(op, size, npes, True)[:2] == ("gshmem", "one_shot")


def test_explain_states_the_choice_for_every_op_size_and_pe_count():
    for op in OPS:
        for size in SIZES:
            for npes in (1, 2, 3, 4, 8, 16):
                for nccl, sym in ((False, False), (True, False), (True, True)):
                    backend, algo, why = choose(op, size, npes, nccl, sym)
                    assert backend in ("gshmem", "nccl") and why
                    assert (algo == "nccl") == (backend == "nccl")
                    code = coll_select.op_code(op)
                    text = _C.coll_explain_query(code, size, npes, nccl, sym)
                    pes = f"{npes} PE{'s' if npes > 1 else ''}"
                    chosen = backend if backend == "nccl" else f"gshmem {algo}"
                    assert text == f"{op} {size} B on {pes}: {chosen} ({why})"


def test_explain_format():
    text = _C.coll_explain_query(0, MiB, 4, True, True)
    assert text == ("all_reduce 1048576 B on 4 PEs: gshmem two_shot (above the one-shot "
                    "threshold of 512 KiB for pushed inputs; at most the NCCL threshold of "
                    "8 MiB)")  # fmt: skip
    text = _C.coll_explain_query(0, MiB, 4, True)
    assert text == ("all_reduce 1048576 B on 4 PEs: nccl (above the NCCL threshold of 256 KiB "
                    "for staged outputs)")  # fmt: skip


def test_global_backend_override(monkeypatch):
    monkeypatch.setenv("GSHMEM_COLL_BACKEND", "gshmem")
    b, a, why = choose("all_reduce", 1 << 30, 4, True)
    assert (b, a) == ("gshmem", "two_shot") and why.startswith("GSHMEM_COLL_BACKEND=gshmem")
    monkeypatch.setenv("GSHMEM_COLL_BACKEND", "NCCL")
    assert choose("all_reduce", 8, 4, True)[:2] == ("nccl", "nccl")
    assert choose("all_gather", 8, 4, True)[:2] == ("nccl", "nccl")
    # NCCL has no all-to-all-v or barrier here: the global setting leaves them one-sided
    b, _, why = choose("all_to_allv", 8, 4, True)
    assert b == "gshmem" and "NCCL has no all_to_allv" in why
    monkeypatch.setenv("GSHMEM_COLL_BACKEND", "auto")
    assert choose("all_reduce", 8, 4, True)[:2] == ("gshmem", "packet")


def test_per_op_backend_override_wins(monkeypatch):
    monkeypatch.setenv("GSHMEM_COLL_BACKEND", "nccl")
    monkeypatch.setenv("GSHMEM_COLL_ALL_REDUCE_BACKEND", "gshmem")
    assert choose("all_reduce", 1 << 30, 4, True)[0] == "gshmem"
    assert choose("all_gather", 8, 4, True)[0] == "nccl"
    monkeypatch.setenv("GSHMEM_COLL_BROADCAST_BACKEND", "nccl")
    assert choose("broadcast", 8, 4, True)[:2] == ("nccl", "nccl")


def test_algo_override(monkeypatch):
    monkeypatch.setenv("GSHMEM_COLL_ALL_REDUCE_ALGO", "two-shot")
    b, a, why = choose("all_reduce", 8, 4, True)
    assert (b, a, why) == ("gshmem", "two_shot", "GSHMEM_COLL_ALL_REDUCE_ALGO=two-shot")
    assert choose("all_reduce", 1 << 30, 4, True)[:2] == ("gshmem", "two_shot")
    monkeypatch.setenv("GSHMEM_COLL_ALL_GATHER_ALGO", "one_shot")
    assert choose("all_gather", 8, 4, False)[1] == "one_shot"
    monkeypatch.setenv("GSHMEM_COLL_BACKEND", "nccl")  # the specific setting wins over global
    assert choose("all_reduce", 8, 4, True)[:2] == ("gshmem", "two_shot")


def test_threshold_overrides(monkeypatch):
    monkeypatch.setenv("GSHMEM_COLL_ALL_REDUCE_PACKET_MAX", "64K")
    b, a, why = choose("all_reduce", 64 * KiB, 8, False)  # set values are not scaled
    assert a == "packet" and "GSHMEM_COLL_ALL_REDUCE_PACKET_MAX" in why
    monkeypatch.setenv("GSHMEM_COLL_ALL_REDUCE_PACKET_MAX", "0")
    assert choose("all_reduce", 8, 4, False)[1] == "one_shot"
    monkeypatch.setenv("GSHMEM_COLL_ALL_REDUCE_ONE_SHOT_MAX", "1M")
    assert choose("all_reduce", MiB, 4, False)[1] == "one_shot"
    assert choose("all_reduce", MiB + 1, 4, False)[1] == "two_shot"
    monkeypatch.setenv("GSHMEM_COLL_ALL_REDUCE_NCCL_MIN", "2M")
    assert choose("all_reduce", 2 * MiB + 1, 4, True)[0] == "nccl"
    assert choose("all_reduce", 2 * MiB, 4, True)[0] == "gshmem"
    monkeypatch.setenv("GSHMEM_COLL_ALL_REDUCE_NCCL_MIN", "never")
    assert choose("all_reduce", 1 << 40, 4, True)[0] == "gshmem"
    monkeypatch.setenv("GSHMEM_COLL_ALL_GATHER_NCCL_MIN", "0")
    assert choose("all_gather", 1, 4, True)[0] == "nccl"
    monkeypatch.setenv("GSHMEM_COLL_ALL_GATHER_PACKET_MAX", "4K")
    assert choose("all_gather", 4 * KiB, 4, False)[1] == "packet"
    assert choose("all_gather", 4 * KiB + 1, 4, False)[1] == "one_shot"  # 64 KiB by default


@pytest.mark.parametrize(
    "var,value,match",
    [
        ("GSHMEM_COLL_BACKEND", "mpi", "GSHMEM_COLL_BACKEND='mpi'.*auto, gshmem or nccl"),
        ("GSHMEM_COLL_ALL_REDUCE_BACKEND", "fast", "GSHMEM_COLL_ALL_REDUCE_BACKEND='fast'.*auto"),
        ("GSHMEM_COLL_ALL_REDUCE_ALGO", "tree",
         "GSHMEM_COLL_ALL_REDUCE_ALGO='tree'.*packet, one_shot or two_shot"),
        ("GSHMEM_COLL_ALL_REDUCE_ALGO", "nccl", "ALL_REDUCE_BACKEND=nccl"),
        ("GSHMEM_COLL_ALL_REDUCE_PACKET_MAX", "8 apples", "GSHMEM_COLL_ALL_REDUCE_PACKET_MAX"),
        ("GSHMEM_COLL_ALL_REDUCE_NCCL_MIN", "-1", "GSHMEM_COLL_ALL_REDUCE_NCCL_MIN"),
    ],
)  # fmt: skip
def test_malformed_overrides_are_usage_errors(monkeypatch, var, value, match):
    monkeypatch.setenv(var, value)
    with pytest.raises(gshmem.UsageError, match=match):
        choose("all_reduce", 64 * MiB + 1, 4, True)


def test_algo_not_offered_by_the_op(monkeypatch):
    monkeypatch.setenv("GSHMEM_COLL_ALL_TO_ALLV_ALGO", "packet")
    with pytest.raises(gshmem.UsageError, match="not an algorithm of all_to_allv; use one_shot"):
        choose("all_to_allv", 8, 4, False)
    monkeypatch.setenv("GSHMEM_COLL_ALL_GATHER_ALGO", "two_shot")
    with pytest.raises(gshmem.UsageError, match="packet, one_shot or exchange"):
        choose("all_gather", 8, 4, False)
    monkeypatch.setenv("GSHMEM_COLL_BROADCAST_ALGO", "packet")
    with pytest.raises(gshmem.UsageError, match="not an algorithm of broadcast; use one_shot or"):
        choose("broadcast", 8, 4, False)
    monkeypatch.setenv("GSHMEM_COLL_ALL_REDUCE_ALGO", "exchange")  # reductions have none
    with pytest.raises(gshmem.UsageError, match="not an algorithm of all_reduce"):
        choose("all_reduce", 8, 4, False)


@pytest.mark.parametrize("op", ["all_gather", "broadcast", "all_to_all"])
def test_the_exchange_by_name_on_any_team(op, monkeypatch):
    # GSHMEM_COLL_<OP>_ALGO=exchange: copy-engine puts between NVLink peers too, at any size,
    # into a symmetric out only; on a team beyond reach it takes the proxy over NCCL
    monkeypatch.setenv(f"GSHMEM_COLL_{op.upper()}_ALGO", "exchange")
    for size in (8, 8 * MiB, 1 << 30):
        assert choose(op, size, 4, True, symmetric=True)[:2] == ("gshmem", "exchange")
    with pytest.raises(gshmem.UsageError, match="needs a symmetric out"):
        choose(op, 8, 4, False)
    b, a, _ = choose(op, 8, 4, True, symmetric=True, beyond_reach=True, proxy=True)
    assert (b, a) == ("gshmem", "exchange")
    with pytest.raises(gshmem.UsageError, match="unset GSHMEM_COLL_"):
        choose(op, 8, 4, True, symmetric=True, beyond_reach=True, proxy=False)


def test_conflicting_overrides(monkeypatch):
    monkeypatch.setenv("GSHMEM_COLL_ALL_REDUCE_BACKEND", "nccl")
    monkeypatch.setenv("GSHMEM_COLL_ALL_REDUCE_ALGO", "one_shot")
    with pytest.raises(gshmem.UsageError, match="unset one of them"):
        choose("all_reduce", 8, 4, True)


@pytest.mark.parametrize("var", ["GSHMEM_COLL_BACKEND", "GSHMEM_COLL_ALL_GATHER_BACKEND"])
def test_nccl_asked_but_not_enabled(monkeypatch, var):
    monkeypatch.setenv(var, "nccl")
    with pytest.raises(gshmem.UsageError, match=r"enable_nccl"):
        choose("all_gather", 8, 4, False)


def test_nccl_backend_has_no_all_to_allv(monkeypatch):
    monkeypatch.setenv("GSHMEM_COLL_ALL_TO_ALLV_BACKEND", "nccl")
    with pytest.raises(gshmem.UsageError, match="NCCL backend has no all_to_allv"):
        choose("all_to_allv", 8, 4, True)


@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter", "broadcast",
                                "all_to_all"])  # fmt: skip
def test_members_beyond_load_store_reach_take_nccl(op):
    # gshmem's collectives run on loads and stores: a team reaching another host goes to NCCL at
    # every size, the one-sided thresholds notwithstanding
    for size in (8, 64 * KiB, 8 * MiB, 1 << 30):
        b, a, why = choose(op, size, 4, True, symmetric=True, beyond_reach=True)
        assert (b, a) == ("nccl", "nccl") and "beyond load/store reach" in why, (op, size)
    with pytest.raises(gshmem.UsageError, match=f"{op}: a member .*enable_nccl"):
        choose(op, 8, 4, False, beyond_reach=True)


@pytest.mark.parametrize("op", ["all_gather", "broadcast", "all_to_all"])
def test_members_on_the_proxy_path_take_the_exchange_without_nccl(op, monkeypatch):
    # the moving collectives into a symmetric out: puts through the proxy, at every size
    for size in (8, 64 * KiB, 8 * MiB, 1 << 30):
        b, a, why = choose(op, size, 4, False, symmetric=True, beyond_reach=True, proxy=True)
        assert (b, a) == ("gshmem", "exchange") and "through the proxy" in why, (op, size)
    # NCCL, where enabled, keeps them unless gshmem is asked for
    assert choose(op, 8, 4, True, symmetric=True, beyond_reach=True, proxy=True)[0] == "nccl"
    monkeypatch.setenv("GSHMEM_COLL_BACKEND", "gshmem")
    b, a, why = choose(op, 8, 4, True, symmetric=True, beyond_reach=True, proxy=True)
    assert (b, a) == ("gshmem", "exchange") and why.startswith("GSHMEM_COLL_BACKEND=gshmem")
    # a staged output has no address at the receiver: NCCL or a clear error
    with pytest.raises(gshmem.UsageError, match=f"{op}: .*needs a symmetric out.*unset"):
        choose(op, 8, 4, True, symmetric=False, beyond_reach=True, proxy=True)
    monkeypatch.delenv("GSHMEM_COLL_BACKEND")
    with pytest.raises(gshmem.UsageError, match=f"{op}: .*needs a symmetric out.*enable_nccl"):
        choose(op, 8, 4, False, symmetric=False, beyond_reach=True, proxy=True)
    # reachable teams never take it
    assert choose(op, 8 * MiB, 4, False, symmetric=True, proxy=True)[1] != "exchange"


def test_reductions_through_the_proxy(monkeypatch):
    # all_reduce and reduce_scatter stage through the proxy comm's exchange slots: any out
    for op in ("all_reduce", "reduce_scatter"):
        for symmetric in (False, True):
            b, a, why = choose(op, 8 * MiB, 4, False, symmetric, beyond_reach=True, proxy=True)
            assert (b, a) == ("gshmem", "exchange") and "reduced here" in why, (op, symmetric)
        assert choose(op, 8, 4, True, beyond_reach=True, proxy=True)[0] == "nccl"
        with pytest.raises(gshmem.UsageError, match=f"{op}: .*no proxy path.*enable_nccl"):
            choose(op, 8, 4, False, beyond_reach=True, proxy=False)
    with pytest.raises(gshmem.UsageError, match="all_to_allv: .* NCCL has none"):
        choose("all_to_allv", 8, 4, True, beyond_reach=True, proxy=True)
    monkeypatch.setenv("GSHMEM_COLL_BACKEND", "nccl")
    with pytest.raises(gshmem.UsageError, match="GSHMEM_COLL_BACKEND=nccl"):
        choose("all_gather", 8, 4, False, symmetric=True, beyond_reach=True, proxy=True)


def test_members_beyond_reach_refuse_what_nccl_cannot_run(monkeypatch):
    with pytest.raises(gshmem.UsageError, match="all_to_allv: a member .* NCCL has none"):
        choose("all_to_allv", 8, 4, True, beyond_reach=True)
    monkeypatch.setenv("GSHMEM_COLL_ALL_REDUCE_ALGO", "packet")
    with pytest.raises(gshmem.UsageError, match="unset GSHMEM_COLL_ALL_REDUCE_ALGO=packet"):
        choose("all_reduce", 8, 4, True, beyond_reach=True)
    monkeypatch.delenv("GSHMEM_COLL_ALL_REDUCE_ALGO")
    monkeypatch.setenv("GSHMEM_COLL_BACKEND", "gshmem")
    with pytest.raises(gshmem.UsageError, match="unset GSHMEM_COLL_BACKEND=gshmem"):
        choose("broadcast", 8, 4, True, beyond_reach=True)
    # an explicit NCCL is what it would take anyway
    monkeypatch.setenv("GSHMEM_COLL_BACKEND", "nccl")
    assert choose("all_gather", 8, 4, True, beyond_reach=True)[0] == "nccl"


def test_bad_queries():
    with pytest.raises(gshmem.UsageError, match="at least 1 PE"):
        choose("all_reduce", 8, 0, False)
    with pytest.raises(gshmem.UsageError, match="unknown collective"):
        _C.coll_choose(99, 8, 4, False)


def test_decisions_are_logged_once_at_debug_level(monkeypatch, capfd):
    monkeypatch.setenv("GSHMEM_DEBUG", "1")
    for _ in range(3):
        choose("reduce_scatter", 12345, 5, False)
    err = capfd.readouterr().err
    line = "gshmem[coll] reduce_scatter 12345 B on 5 PEs: gshmem packet"
    assert err.count(line) == 1
    monkeypatch.setenv("GSHMEM_DEBUG", "0")
    choose("reduce_scatter", 12345, 6, False)
    assert "gshmem[coll]" not in capfd.readouterr().err


# -- the NCCL loader ------------------------------------------------------------------------------


def test_nccl_probe_missing_library_is_clear():
    ok, why, version = _C.nccl_probe("/nonexistent/libnccl.so.2")
    assert not ok and version == 0
    assert "/nonexistent/libnccl.so.2" in why and "GSHMEM_NCCL_LIBRARY" in why


def test_nccl_probe_honours_the_library_variable(monkeypatch):
    monkeypatch.setenv("GSHMEM_NCCL_LIBRARY", "/nonexistent")
    ok, why, _ = _C.nccl_probe()
    assert not ok and "/nonexistent" in why and "libnccl.so.2:" not in why


def test_nccl_probe_tries_the_search_path(monkeypatch, tmp_path):
    try:
        ctypes.CDLL("libnccl.so.2")
    except OSError:
        pass
    else:  # a system NCCL (or torch's, already loaded) answers first: the path is never read
        pytest.skip("the dynamic loader finds libnccl.so.2 on this machine")
    monkeypatch.delenv("GSHMEM_NCCL_LIBRARY", raising=False)
    monkeypatch.setenv("GSHMEM_NCCL_SEARCH_PATH", f"{tmp_path}:/also/not/here")
    ok, why, _ = _C.nccl_probe()
    assert not ok and f"{tmp_path}/libnccl.so.2" in why and "/also/not/here/libnccl.so.2" in why


def test_nccl_probe_rejects_a_library_without_nccl():
    libc = "libc.so.6"
    ok, why, _ = _C.nccl_probe(libc)
    assert not ok and "missing ncclGetVersion" in why and "ncclAllReduce" in why


STUB = r"""
typedef struct { char internal[128]; } ncclUniqueId;
int ncclGetVersion(int* v) { *v = VERSION; return 0; }
int ncclGetUniqueId(ncclUniqueId* id) { return 0; }
int ncclCommInitRank(void** c, int n, ncclUniqueId id, int r) { return 0; }
int ncclCommDestroy(void* c) { return 0; }
int ncclAllReduce() { return 0; }
int ncclAllGather() { return 0; }
int ncclReduceScatter() { return 0; }
int ncclBroadcast() { return 0; }
int ncclSend() { return 0; }
int ncclRecv() { return 0; }
int ncclGroupStart() { return 0; }
int ncclGroupEnd() { return 0; }
const char* ncclGetErrorString(int r) { return "stub"; }
"""


def _stub(tmp_path, version: int) -> str:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build a stub NCCL library")
    src = tmp_path / "stub.c"
    src.write_text(STUB)
    lib = tmp_path / f"libnccl-{version}.so"
    subprocess.run([cc, "-shared", "-fPIC", f"-DVERSION={version}", str(src), "-o", str(lib)],
                   check=True)  # fmt: skip
    return str(lib)


def test_nccl_probe_accepts_a_new_enough_library(tmp_path):
    lib = _stub(tmp_path, 22809)
    assert _C.nccl_probe(lib) == (True, lib, 22809)


def test_nccl_probe_rejects_an_old_library(tmp_path):
    ok, why, _ = _C.nccl_probe(_stub(tmp_path, 21705))
    assert not ok and "NCCL 2.17.5" in why and "2.18 or newer" in why


def test_wheel_dirs_are_found_without_importing(monkeypatch, tmp_path):
    lib = tmp_path / "nvidia" / "nccl" / "lib"
    lib.mkdir(parents=True)
    (lib / "libnccl.so.2").write_bytes(b"")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert str(lib.resolve()) in coll_select.nccl_wheel_dirs()
