"""GPU checks of the collectives through PyTorch and through NCCL, run as one rank of
`python -m gshmem.run -n N`.

Usage: coll_torch_check.py SCENARIO
  torch     gshmem.torch's ops (in place, out=, new tensor) on ordinary and symmetric tensors,
            random data, against float64/int64 references built from every member's data;
            then a CUDA graph of them replayed on new data; then torch.compile(fullgraph=True)
            of a function that calls them (a graph break would fail the compile)
  nccl      comm.enable_nccl(); with GSHMEM_COLL_BACKEND=nccl every collective NCCL has runs
            through NCCL (explain says so) and matches the references; auto mode sends an
            all_reduce above the NCCL threshold to NCCL and a small one to gshmem, both right
Prints "PASS <scenario>" on success; any failure raises (non-zero exit).
"""

from __future__ import annotations

import os

import coll_check
import torch
from coll_check import check_reduced, gen, seed

import gshmem
import gshmem.torch as gt

DTYPES = [torch.float32, torch.bfloat16, torch.int64]
COUNTS = [5, 4099, 300_007]  # packet, one-shot and large sizes, none divisible by the PE count


def members_data(k: int, n: int, count: int, dtype: torch.dtype, op: str, dev: str):
    return [gen(seed(k, m, 11), count, dtype, op, dev) for m in range(n)]


def check_all(comm: gshmem.Comm, sym: bool, k0: int, tag: str, roundings: int = 1) -> int:
    """Every gshmem.torch op, every form, on `sym`metric or ordinary tensors; returns cases.
    `roundings`: see coll_check.check_reduced."""
    n, me, dev = comm.nranks, comm.rank, f"cuda:{comm.device}"
    cases = 0

    made: list[torch.Tensor] = []  # symmetric tensors to free (a collective, made alike on all)

    def tensor(count: int, dtype: torch.dtype) -> torch.Tensor:
        if not sym:
            return torch.empty(count, dtype=dtype, device=dev)
        made.append(comm.empty((count,), dtype))
        return made[-1]

    k = k0
    for count in COUNTS:
        for dtype in DTYPES:
            k += 1
            what = f"{tag} sym={sym} {dtype} x{count}"
            for op in ("sum", "max"):
                xs = members_data(k, n, count, dtype, op, dev)
                x = tensor(count, dtype)
                x.copy_(xs[me])
                out = tensor(count, dtype)
                gt.all_reduce(x, op=op, comm=comm, out=out)
                check_reduced(out, xs, op, f"{what} all_reduce({op}, out=)", roundings)
                gt.all_reduce(x, op=op, comm=comm)
                check_reduced(x, xs, op, f"{what} all_reduce({op}) in place", roundings)
                wide = members_data(k + 500, n, n * count, dtype, op, dev)
                y = tensor(n * count, dtype)
                y.copy_(wide[me])
                got = gt.reduce_scatter(y, op=op, comm=comm)
                blocks = [w[me * count : (me + 1) * count] for w in wide]
                check_reduced(got, blocks, op, f"{what} reduce_scatter({op})", roundings)
                cases += 3
            xs = members_data(k, n, count, dtype, "sum", dev)
            x = tensor(count, dtype)
            x.copy_(xs[me])
            assert torch.equal(gt.all_gather(x, comm=comm), torch.cat(xs)), f"{what} all_gather"
            root = k % n
            b = tensor(count, dtype)
            b.copy_(xs[me])
            gt.broadcast(b, root=root, comm=comm)
            assert torch.equal(b, xs[root]), f"{what} broadcast root {root}"
            wide = members_data(k + 900, n, n * count, dtype, "sum", dev)
            a = tensor(n * count, dtype)
            a.copy_(wide[me])
            out = tensor(n * count, dtype)
            gt.all_to_all(a, comm=comm, out=out)
            want = torch.cat([w[me * count : (me + 1) * count] for w in wide])
            assert torch.equal(out, want), f"{what} all_to_all"
            cases += 3
            torch.cuda.synchronize()
            while made:
                comm.free(made.pop())
    torch.cuda.synchronize()
    return cases


def check_graph(comm: gshmem.Comm) -> str:
    n, me, dev = comm.nranks, comm.rank, f"cuda:{comm.device}"
    count, replays = 70_001, 30
    base = [gen(seed(3, m, 5), count, torch.int32, "sum", dev) for m in range(n)]
    total = torch.stack(base).sum(0).to(torch.int32)
    x, out = torch.empty_like(base[me]), torch.empty_like(base[me])
    it = torch.zeros((), dtype=torch.int32, device=dev)
    errors = torch.zeros((), dtype=torch.int64, device=dev)

    def body() -> None:
        it.add_(1)
        torch.add(base[me], it, out=x)
        gt.all_reduce(x, comm=comm, out=out)
        errors.add_((out != total + n * it).sum())
        gathered = gt.all_gather(x, comm=comm)
        errors.add_((gathered != torch.cat(base) + it).sum())

    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        body()
    for _ in range(replays):
        graph.replay()
    torch.cuda.synchronize()
    assert it.item() == replays and errors.item() == 0, (it.item(), errors.item())
    return f"graph {replays} replays"


def check_compile(comm: gshmem.Comm) -> str:
    n, me, dev = comm.nranks, comm.rank, f"cuda:{comm.device}"
    xs = [gen(seed(4, m, 6), 1000, torch.float32, "sum", dev) for m in range(n)]

    def f(x: torch.Tensor) -> torch.Tensor:
        y = gt.functional.all_reduce(x * 2, comm=comm)
        return gt.functional.all_gather(y + 1, comm=comm)

    def g(x: torch.Tensor) -> torch.Tensor:  # the default comm
        return gt.functional.all_gather(gt.functional.all_reduce(x * 2) + 1)

    want = (torch.stack(xs).double().sum(0) * 2 + 1).repeat(n)
    gt.set_default_comm(comm)
    for fn in (f, g):
        got = torch.compile(fn, fullgraph=True)(xs[me])
        err = (got.double() - want).abs().max().item()
        assert err < 1e-3 * (want.abs().max().item() + 1), f"torch.compile: max error {err}"
    gt.set_default_comm(None)
    return "torch.compile(fullgraph=True), with comm= and the default comm"


def scenario_torch(comm: gshmem.Comm) -> str:
    cases = check_all(comm, False, 0, "[torch]") + check_all(comm, True, 100, "[torch]")
    return f"{cases} cases; {check_graph(comm)}; {check_compile(comm)}"


def scenario_nccl(comm: gshmem.Comm) -> str:
    comm.enable_nccl()
    os.environ["GSHMEM_COLL_BACKEND"] = "nccl"
    for op in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all"):
        text = comm.explain(op, 4096)
        assert ": nccl (" in text, text
    n = comm.nranks
    cases = check_all(comm, False, 200, "[nccl]", n) + check_all(comm, True, 300, "[nccl]", n)
    os.environ["GSHMEM_COLL_BACKEND"] = "auto"
    assert ": nccl (" in comm.explain("all_reduce", 1 << 30), comm.explain("all_reduce", 1 << 30)
    assert ": gshmem " in comm.explain("all_reduce", 8), comm.explain("all_reduce", 8)
    me, dev = comm.rank, f"cuda:{comm.device}"
    for count in (3, (32 << 20) // 4 + 5):  # 12 B (gshmem packet) and 32 MiB (NCCL) of fp32
        xs = members_data(400 + count % 97, n, count, torch.float32, "sum", dev)
        x = xs[me].clone()
        gt.all_reduce(x, comm=comm)
        check_reduced(x, xs, "sum", f"[auto] all_reduce x{count}", n)
    torch.cuda.synchronize()
    return f"{cases + 2} cases"


if __name__ == "__main__":
    coll_check.main({"torch": scenario_torch, "nccl": scenario_nccl})
