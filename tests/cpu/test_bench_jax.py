"""`python -m gshmem.bench jax`'s options (the measurement itself needs GPUs)."""

from __future__ import annotations

import pytest

from gshmem.bench import jax_suite
from gshmem.bench.__main__ import SUITES


def test_options() -> None:
    assert "jax" in SUITES
    o = jax_suite.parse_args(["--ops", "psum", "-b", "1K", "-e", "1M", "--layout", "per-gpu",
                              "--np", "2"])  # fmt: skip
    assert o.ops == ["psum"] and o.minbytes == 1024 and o.maxbytes == 1 << 20
    assert o.layout == "per-gpu" and o.nprocs == 2
    d = jax_suite.parse_args([])
    assert d.layout == "one" and d.ops == ["ppermute", "psum", "attention"]
    assert d.maxbytes == 256 << 20 and d.tokens == [2048, 8192, 32768]


BAD = [["--ops", "pmax"], ["--calls", "0"], ["--inflight", "0"], ["--layout", "two"],
       ["--tokens", "lots"]]  # fmt: skip


@pytest.mark.parametrize("bad", BAD)
def test_bad_options_exit_2(bad) -> None:
    with pytest.raises(SystemExit) as e:
        jax_suite.parse_args(bad)
    assert e.value.code == 2


@pytest.mark.parametrize(("took", "want_calls"), [(1e-4, 20), (0.1, 5), (3.0, 1)])
def test_attention_timing_chains_calls(monkeypatch, took, want_calls) -> None:
    """The attention rows time calls in a row, as many as timing.schedule gives for the time
    of one call (the host's dispatch overlapping the GPU's work): short calls 20 at a time."""
    pytest.importorskip("jax")
    from gshmem.bench import jax_attention

    clock = {"now": 0.0}
    monkeypatch.setattr(jax_attention.time, "perf_counter", lambda: clock["now"])
    calls = []

    def fn():
        calls.append(1)
        clock["now"] += took
        return 0

    seconds = jax_attention._seconds(fn, (), warmup=2, repeats=3)
    assert seconds == pytest.approx(took)
    warm = min(2, want_calls)
    reps = max(1, min(3, int(10.0 / (took * want_calls))))
    assert len(calls) == 2 + warm + reps * want_calls  # compile, estimate, warm-up, timed


@pytest.mark.parametrize("inflight", [1, 4])
def test_chained_calls_are_timed_in_flight(monkeypatch, inflight) -> None:
    """The ppermute/psum rows dispatch ``inflight`` executions before waiting for the last, and
    divide the time by every call they made: waiting after each would add each execution's host
    work to the GPU's."""
    clock = {"now": 0.0}
    monkeypatch.setattr(jax_suite.time, "perf_counter", lambda: clock["now"])
    events = []

    class Result:
        def block_until_ready(self) -> None:
            events.append("wait")

    # the warm-up, then three repeats whose calls take 50, 20 and 10 us: the median is 20 (not
    # the first, the last, the mean or the least)
    factor = [1, 5, 2, 1]

    def fn(x):
        events.append("run")
        runs = events.count("run")
        clock["now"] += 0.002 * factor[0 if runs == 1 else (runs - 2) // inflight + 1]
        return Result()

    assert jax_suite._timed(fn, None, warmup=1, repeats=3, calls=200, inflight=inflight) == (
        pytest.approx(20e-6)
    )
    timed = (["run"] * inflight + ["wait"]) * 3
    assert events == ["run", "wait"] + timed
    assert jax_suite.parse_args([]).inflight == 4


def test_value_check_catches_wrong_results() -> None:
    """The bench's value check (jax_values.py) on a 4-device CPU mesh: jax.lax's ring permute
    and psum of the probe match the host reference; a permute the other way round, a psum
    scaled and a result left where it was do not, and name their blocks."""
    jax = pytest.importorskip("jax")
    from _jax_lax_wire import need_cpu_devices

    need_cpu_devices(4)
    import numpy as np
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P

    from gshmem.bench import jax_values

    mesh = Mesh(np.array(jax.devices("cpu")[:4]), ("x",))
    n, count = 4, 1000
    ring = [(i, (i + 1) % n) for i in range(n)]
    back = [(i, (i - 1) % n) for i in range(n)]
    x = jax_values.probe(mesh, count)
    assert len({float(v) for v in np.asarray(x)[:: count // 4]}) == 4 * n  # no repeats

    def run(body):
        with jax.set_mesh(mesh):
            fn = jax.jit(jax.shard_map(body, in_specs=P("x"), out_specs=P("x"), check_vma=False))
            return fn(x)

    def check(op, body):
        return jax_values.wrong_blocks(op, run(body), n, count)

    assert check("ppermute", lambda a: jax.lax.ppermute(a, "x", ring)) == []
    assert check("psum", lambda a: jax.lax.psum(a, "x")) == []
    assert check("ppermute", lambda a: jax.lax.ppermute(a, "x", back)) == [0, 1, 2, 3]
    assert check("ppermute", lambda a: a) == [0, 1, 2, 3]
    assert check("psum", lambda a: jax.lax.psum(a, "x") * (1.0 / n)) == [0, 1, 2, 3]
    assert check("psum", lambda a: a * n) == [0, 1, 2, 3]
    # one device's block wrong: only that block is named
    only_two = lambda a: jax.lax.ppermute(a, "x", ring) + (jax.lax.axis_index("x") == 2)  # noqa: E731
    assert check("ppermute", only_two) == [2]
    with pytest.raises(ValueError, match="no reference"):
        jax_values.expected("pmax", n, count, 0)
