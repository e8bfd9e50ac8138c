"""CPU tests of gshmem.torch's custom ops: registered in torch.ops.gshmem with the documented
schemas, shape inference (fake/meta), kept by torch.compile, and a clear gshmem error without a
GPU or a comm."""

from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")

import gshmem  # noqa: E402
import gshmem.torch as gt  # noqa: E402
from gshmem import _registry as registry  # noqa: E402
from gshmem.torch import ops  # noqa: E402

TEAM = [0, 1, 4]


def test_every_op_is_registered_with_its_mutation():
    # the names written out: an op dropped from the registrations and from OPS alike would pass
    assert set(ops.OPS) == {
        "all_reduce", "all_reduce_out", "all_reduce_inplace", "all_gather", "all_gather_out",
        "reduce_scatter", "reduce_scatter_out", "broadcast", "broadcast_out",
        "broadcast_inplace", "all_to_all", "all_to_all_out",
    }  # fmt: skip
    for name in ops.OPS:
        schema = str(getattr(torch.ops.gshmem, name).default._schema)
        assert schema.startswith(f"gshmem::{name}(")
        if name.endswith("_out"):
            assert re.search(r"Tensor\(a\d!\) out", schema) and schema.endswith("-> ()")
        elif name.endswith("_inplace"):
            assert "Tensor(a0!) t" in schema and schema.endswith("-> ()")
        else:
            assert "!" not in schema and schema.endswith("-> Tensor")


def test_fake_shapes():
    x = torch.empty(8, 3, device="meta", dtype=torch.bfloat16)
    assert torch.ops.gshmem.all_reduce(x, "sum", 1, TEAM).shape == (8, 3)
    assert torch.ops.gshmem.all_gather(x, 1, TEAM).shape == (32, 3)
    assert torch.ops.gshmem.reduce_scatter(x, "max", 1, TEAM).shape == (2, 3)
    assert torch.ops.gshmem.broadcast(x, 0, 1, TEAM).shape == (8, 3)
    assert torch.ops.gshmem.all_to_all(x, 1, TEAM).dtype == torch.bfloat16
    with pytest.raises(gshmem.UsageError, match="multiple of the 4 PEs"):
        torch.ops.gshmem.reduce_scatter(torch.empty(6, device="meta"), "sum", 1, TEAM)


@pytest.mark.parametrize("name", ["all_reduce", "all_gather", "reduce_scatter", "all_to_all"])
def test_cpu_tensors_fail_clearly(name):
    x = torch.ones(8)
    args = {"all_reduce": ("sum",), "reduce_scatter": ("sum",)}.get(name, ())
    with pytest.raises(gshmem.UsageError, match=f"gshmem.torch.{name}: t is on cpu"):
        getattr(torch.ops.gshmem, name)(x, *args, 12345, TEAM)
    with pytest.raises(gshmem.UsageError, match="is on cpu"):
        torch.ops.gshmem.all_reduce_inplace(x, "sum", 12345, TEAM)


def test_no_comm_is_a_clear_error():
    registry.set_default_comm(None)
    with pytest.raises(gshmem.UsageError, match="no default comm"):
        gt.all_reduce(torch.ones(4))
    with pytest.raises(gshmem.UsageError, match="no comm has handle 999999"):
        registry.lookup(999999)


def test_registry_is_weak_and_stable():
    class FakeComm:
        alive = True
        nranks = 2

    c = FakeComm()
    h = registry.handle(c)
    assert registry.handle(c) == h and registry.lookup(h) is c
    registry.set_default_comm(c)
    assert registry.resolve(None) == h
    with pytest.raises(gshmem.UsageError, match="is on cpu"):
        gt.all_reduce(torch.ones(4))  # the wrapper reaches the op, which refuses CPU tensors
    registry.set_default_comm(None)
    del c
    import gc

    gc.collect()
    with pytest.raises(gshmem.UsageError):
        registry.lookup(h)


def test_torch_compile_keeps_the_ops():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def f(x):
        y = torch.ops.gshmem.all_reduce(x * 2, "sum", 1, TEAM)
        torch.ops.gshmem.all_reduce_inplace(y, "max", 1, TEAM)
        return torch.ops.gshmem.all_gather(y, 1, TEAM) + 1

    compiled = torch.compile(f, backend=backend, fullgraph=True)
    with pytest.raises(gshmem.UsageError, match="is on cpu"):
        compiled(torch.ones(4))
    code = graphs[0].code
    for name in ("all_reduce", "all_reduce_inplace", "all_gather"):  # whole names: a call
        assert re.search(rf"torch\.ops\.gshmem\.{name}(\.default)?\(", code), (name, code)


def test_torch_compile_traces_the_python_wrappers():
    """gshmem.torch's wrappers with comm= and with the default comm compile with fullgraph=True:
    resolving a registered comm is attribute reads only (the GPU test runs the same on 4 PEs)."""

    class FakeComm:
        alive = True
        nranks = 4

    c = FakeComm()
    registry.handle(c)  # what Comm.__init__ does
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def with_comm(x):
        return gt.functional.all_gather(gt.functional.all_reduce(x * 2, comm=c) + 1, comm=c)

    def with_default(x):
        return gt.functional.all_reduce(x, op="max")

    registry.set_default_comm(c)
    try:
        for f in (with_comm, with_default):
            torch._dynamo.reset()
            with pytest.raises(gshmem.UsageError, match="is on cpu"):
                torch.compile(f, backend=backend, fullgraph=True)(torch.ones(8))
    finally:
        registry.set_default_comm(None)
    assert len(graphs) == 2
    called = [set(re.findall(r"torch\.ops\.gshmem\.(\w+)(?:\.default)?\(", g.code)) for g in graphs]
    assert called == [{"all_reduce", "all_gather"}, {"all_reduce"}], called
