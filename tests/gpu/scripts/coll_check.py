"""GPU checks of the collectives on a stream, run as one rank of `python -m gshmem.run -n N`.

Usage: coll_check.py SCENARIO
  matrix    every collective x dtype x op x count (1, 7, 1001, 65539: none divisible by the PE
            count) over the world team, once per all_reduce algorithm (packet, one_shot,
            two_shot pushed, two_shot pulling symmetric inputs: GSHMEM_COLL_PULL_MIN=0 or never)
            with the other collectives forced to each algorithm they accept
            (select.h re-reads GSHMEM_COLL_<OP>_ALGO at each call, so this process switches them);
            in place and out of place, symmetric and ordinary buffers, in turn for each collective;
            symmetric outputs take the direct path at every size on every other pass
            (GSHMEM_COLL_DIRECT_MIN=0) and the staged one on the others
  big       ~16 MiB per PE (several launches per call: more than one staging slot) for every
            collective and every all_reduce algorithm (two-shot pushed and pulled), each variant
            (direct when symmetric)
  teams     the matrix on sub-teams: even/odd PEs (split_strided), a team of one, and on 4 PEs
            the team {1, 2, 3} that PE 0 is not in
  streams   rows and columns of split_2d, on two streams at once, 60 rounds with no host
            synchronisation between them, checked on the device
  graph     a CUDA graph of every collective (each all_reduce algorithm, a pulled in-place
            two-shot; ordinary and symmetric outputs, so staged and direct) on new data at each
            replay, replayed 50 times, checked on the device (run with a small
            GSHMEM_COLL_SCRATCH_BYTES so that staged calls span several launches)
  permute   comm.permute into ordinary tensors (packets and bulk): random permutations and
            sizes, a graph
  permute_copy  comm.permute into symmetric tensors (GSHMEM_PERMUTE_COPY_MIN=64K): the copy
            engine from 64 KiB mixed with packets, a graph of it, 16 MiB at the default line
  exchange  all_gather, all_to_all, broadcast and permute as exchanges into symmetric outputs
            (through the proxy under GSHMEM_TRANSPORT=proxy, else forced by
            GSHMEM_COLL_<OP>_ALGO=exchange), a graph, the outputs it refuses
  badargs   bad arguments raise gshmem.UsageError naming the problem; collectives work after
  mismatch  (GSHMEM_COLL_CHECK=1) matching calls pass the check; then PE 0 makes an all_reduce of
            one element more than the others, and every PE's kernel must trap (the kernel prints
            both calls); the process then exits at once, its CUDA context being unusable
Every check uses fresh random data that every PE can regenerate from a seed (so each computes the
reference for the whole team), poisons outputs first, and checks elements past the end of each
output are untouched. References are float64 / int64. Integers must match exactly; float min/max
too (they return an input). Float sum and prod must be within
    (2 eps(dtype) + 4 n 2^-23) * S,   S = sum of |inputs| (sum) or |result| (prod),
the bound for accumulating n values in fp32 and rounding once to the output type
(eps: fp32 2^-23, bf16 2^-8, fp16 2^-11); NCCL's checks (coll_torch_check.py) allow n
roundings. Prints "PASS <scenario> ..." on success.
"""

from __future__ import annotations

import os
import random
import sys

import torch
from expect import expect_usage

import gshmem
from gshmem.bench.options import environment

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int64]
OPS = ["sum", "prod", "min", "max"]
COUNTS = [1, 7, 1001, 65539]
SLACK = 64  # elements past each output that must stay poisoned
EPS = {torch.float32: 2.0**-23, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}
# (algorithm, GSHMEM_COLL_PULL_MIN): two-shot pushed, then pulling symmetric inputs in place
ALL_REDUCE_PASSES = [("packet", "never"), ("one_shot", "never"), ("two_shot", "never"),
                     ("two_shot", "0")]  # fmt: skip
# What GSHMEM_COLL_<OP>_ALGO accepts for the other collectives (select.cpp's table).
OTHER_ALGOS = {
    "ALL_GATHER": ("packet", "one_shot"),
    "REDUCE_SCATTER": ("packet", "one_shot"),
    "BROADCAST": ("one_shot",),
    "ALL_TO_ALL": ("packet", "one_shot"),
}


def seed(*parts: int) -> int:
    s = 0
    for p in parts:
        s = (s * 1_000_003 + p) % (1 << 62)
    return s


def force_algo(algo: str) -> None:
    """all_reduce runs `algo`; every other collective runs it where it accepts it, else auto."""
    os.environ["GSHMEM_COLL_ALL_REDUCE_ALGO"] = algo
    for op, accepted in OTHER_ALGOS.items():
        if algo in accepted:
            os.environ[f"GSHMEM_COLL_{op}_ALGO"] = algo
        else:
            os.environ.pop(f"GSHMEM_COLL_{op}_ALGO", None)


def gen(s: int, count: int, dtype: torch.dtype, op: str, device: str) -> torch.Tensor:
    """Random data that cannot overflow the op for 4 PEs (ints) and has no zeros (prod)."""
    g = torch.Generator(device=device).manual_seed(s)
    if dtype.is_floating_point:
        if op == "prod":
            mag = torch.rand(count, generator=g, device=device) + 0.5
            sign = torch.randint(0, 2, (count,), generator=g, device=device) * 2 - 1
            return (mag * sign).to(dtype)
        return (torch.randn(count, generator=g, device=device) * 3).to(dtype)
    if op == "prod":
        mag = torch.randint(1, 6, (count,), generator=g, device=device)
        sign = torch.randint(0, 2, (count,), generator=g, device=device) * 2 - 1
        return (mag * sign).to(dtype)
    if op == "sum":
        lim = 1 << 20 if dtype == torch.int32 else 1 << 50
    else:
        lim = (1 << 31) - 1 if dtype == torch.int32 else 1 << 62
    return torch.randint(-lim, lim, (count,), generator=g, device=device).to(dtype)


def poison_value(dtype: torch.dtype) -> float | int:
    return 1234.5 if dtype.is_floating_point else -777


def check_reduced(
    got: torch.Tensor, xs: list[torch.Tensor], op: str, what: str, roundings: int = 1
) -> None:
    """`roundings`: how many times the implementation rounds to the output type (gshmem: once;
    NCCL rounds 16-bit floats at every step of its ring, up to once per member)."""
    dtype = got.dtype
    wide = torch.float64 if dtype.is_floating_point else torch.int64
    stack = torch.stack([x.to(wide) for x in xs])
    if op == "sum":
        ref = stack.sum(0)
    elif op == "prod":
        ref = stack.prod(0)
    elif op == "min":
        ref = stack.min(0).values
    else:
        ref = stack.max(0).values
    g = got.to(wide)
    if not dtype.is_floating_point or op in ("min", "max"):
        bad = int((g != ref).sum().item())
        assert bad == 0, f"{what}: {bad} of {got.numel()} elements differ from the reference"
        return
    scale = stack.abs().sum(0) if op == "sum" else ref.abs()
    tol = (2 * roundings * EPS[dtype] + 4 * len(xs) * 2.0**-23) * scale + 1e-30
    err = (g - ref).abs()
    bad = int((err > tol).sum().item())
    assert bad == 0, (
        f"{what}: {bad} of {got.numel()} elements off by more than the tolerance "
        f"(worst error {err.max().item():.3g}, tolerance there {tol[err.argmax()].item():.3g})"
    )


class Pool:
    """Input and output memory, symmetric and ordinary, allocated once (heap allocation is a
    collective: every PE makes the same calls, whatever its teams)."""

    def __init__(self, comm: gshmem.Comm, in_bytes: int, out_bytes: int) -> None:
        dev = f"cuda:{comm.device}"
        self.mem = {
            ("in", True): comm.empty((in_bytes,), torch.uint8),
            ("out", True): comm.empty((out_bytes,), torch.uint8),
            ("in", False): torch.empty(in_bytes, dtype=torch.uint8, device=dev),
            ("out", False): torch.empty(out_bytes, dtype=torch.uint8, device=dev),
        }

    def take(self, which: str, sym: bool, count: int, dtype: torch.dtype):
        """(whole, view): `count` elements followed by SLACK, all poisoned; view is the first
        `count`."""
        es = torch.empty((), dtype=dtype).element_size()
        base = self.mem[(which, sym)]
        whole = base[: (count + SLACK) * es].view(dtype)
        whole.fill_(poison_value(dtype))
        return whole, whole[:count]

    def free(self, comm: gshmem.Comm) -> None:
        for (_, sym), t in self.mem.items():
            if sym:
                comm.free(t)


def untouched(whole: torch.Tensor, count: int, what: str) -> None:
    tail = whole[count:]
    assert bool((tail == poison_value(whole.dtype)).all().item()), f"{what}: wrote past the end"


class Checker:
    """Runs and checks collectives on one team (None: the world) from this PE."""

    def __init__(self, comm: gshmem.Comm, pool: Pool, team: gshmem.Team | None) -> None:
        self.comm, self.pool, self.team = comm, pool, team
        self.members = list(range(comm.nranks)) if team is None else team.members()
        self.me = comm.rank if team is None else team.rank
        self.n = len(self.members)
        self.dev = f"cuda:{comm.device}"
        self.cases = 0
        self.turns: dict[str, int] = {}

    def data(self, k: int, member: int, count: int, dtype, op: str = "sum") -> torch.Tensor:
        return gen(seed(k, self.members[member], 7), count, dtype, op, self.dev)

    def variant(self, op: str) -> tuple[bool, bool]:
        """(in place, symmetric): each collective takes the four in turn, whatever else varies."""
        turn = self.turns.get(op, 0)
        self.turns[op] = turn + 1
        return turn % 2 == 1, (turn // 2) % 2 == 1

    def all_reduce(self, k: int, count: int, dtype, op: str, tag: str) -> None:
        inplace, sym = self.variant("all_reduce")
        what = f"{tag} all_reduce {op} {dtype} x{count} inplace={inplace} sym={sym}"
        xs = [self.data(k, m, count, dtype, op) for m in range(self.n)]
        whole, out = self.pool.take("out", sym, count, dtype)
        if inplace:
            out.copy_(xs[self.me])
            self.comm.all_reduce(out, op=op, team=self.team)
        else:
            _, x = self.pool.take("in", sym, count, dtype)
            x.copy_(xs[self.me])
            self.comm.all_reduce(x, op=op, out=out, team=self.team)
            assert torch.equal(x, xs[self.me]), f"{what}: the input changed"
        check_reduced(out, xs, op, what)
        untouched(whole, count, what)
        self.cases += 1

    def reduce_scatter(self, k: int, count: int, dtype, op: str, tag: str) -> None:
        inplace, sym = self.variant("reduce_scatter")
        what = f"{tag} reduce_scatter {op} {dtype} x{count} inplace={inplace} sym={sym}"
        n, me = self.n, self.me
        xs = [self.data(k, m, n * count, dtype, op) for m in range(n)]
        whole_in, x = self.pool.take("in", sym, n * count, dtype)
        x.copy_(xs[me])
        if inplace:
            whole, out = whole_in, x[me * count : (me + 1) * count]
            self.comm.reduce_scatter(x, out=out, op=op, team=self.team)
        else:
            whole, out = self.pool.take("out", sym, count, dtype)
            self.comm.reduce_scatter(x, out=out, op=op, team=self.team)
        check_reduced(out, [y[me * count : (me + 1) * count] for y in xs], op, what)
        untouched(whole, n * count if inplace else count, what)
        self.cases += 1

    def all_gather(self, k: int, count: int, dtype, tag: str) -> None:
        inplace, sym = self.variant("all_gather")
        what = f"{tag} all_gather {dtype} x{count} inplace={inplace} sym={sym}"
        n, me = self.n, self.me
        xs = [self.data(k, m, count, dtype) for m in range(n)]
        whole, out = self.pool.take("out", sym, n * count, dtype)
        if inplace:
            mine = out[me * count : (me + 1) * count]
            mine.copy_(xs[me])
            self.comm.all_gather(mine, out=out, team=self.team)
        else:
            _, x = self.pool.take("in", sym, count, dtype)
            x.copy_(xs[me])
            self.comm.all_gather(x, out=out, team=self.team)
        assert torch.equal(out, torch.cat(xs)), f"{what}: data differs"
        untouched(whole, n * count, what)
        self.cases += 1

    def broadcast(self, k: int, count: int, dtype, tag: str) -> None:
        inplace, sym = self.variant("broadcast")
        root = k % self.n
        what = f"{tag} broadcast root {root} {dtype} x{count} inplace={inplace} sym={sym}"
        x_root = self.data(k, root, count, dtype)
        whole, out = self.pool.take("out", sym, count, dtype)
        if inplace:
            if self.me == root:
                out.copy_(x_root)
            self.comm.broadcast(out, root, team=self.team)
        else:
            _, x = self.pool.take("in", sym, count, dtype)
            if self.me == root:
                x.copy_(x_root)
            self.comm.broadcast(x, root, out=out, team=self.team)
        assert torch.equal(out, x_root), f"{what}: data differs"
        untouched(whole, count, what)
        self.cases += 1

    def all_to_all(self, k: int, count: int, dtype, tag: str) -> None:
        inplace, sym = self.variant("all_to_all")
        what = f"{tag} all_to_all {dtype} x{count} inplace={inplace} sym={sym}"
        n, me = self.n, self.me
        xs = [self.data(k, m, n * count, dtype) for m in range(n)]
        want = torch.cat([xs[t][me * count : (me + 1) * count] for t in range(n)])
        if inplace:
            whole, out = self.pool.take("in", sym, n * count, dtype)
            out.copy_(xs[me])
            self.comm.all_to_all(out, out=out, team=self.team)
        else:
            _, x = self.pool.take("in", sym, n * count, dtype)
            x.copy_(xs[me])
            whole, out = self.pool.take("out", sym, n * count, dtype)
            self.comm.all_to_all(x, out=out, team=self.team)
        assert torch.equal(out, want), f"{what}: data differs"
        untouched(whole, n * count, what)
        self.cases += 1

    def all_to_allv(self, k: int, count: int, dtype, tag: str) -> None:
        _, sym = self.variant("all_to_allv")
        n, me = self.n, self.me
        rng = random.Random(seed(k, 99))  # the same matrix on every PE
        c = [[rng.randrange(0, count + 1) for _ in range(n)] for _ in range(n)]  # c[src][dst]
        gap = 3 if k % 2 else 0  # explicit displacements with holes, or packed defaults

        def displs(counts: list[int]) -> list[int]:
            return [sum(counts[:i]) + gap * i for i in range(len(counts))]

        send = [[c[s][d] for d in range(n)] for s in range(n)]
        xs = [self.data(k, s, sum(send[s]) + gap * n, dtype) for s in range(n)]
        recv = [c[s][me] for s in range(n)]
        rd = displs(recv)
        what = f"{tag} all_to_allv {dtype} counts {c} gap {gap} sym={sym}"
        total_out = sum(recv) + gap * n
        _, x = self.pool.take("in", sym, sum(send[me]) + gap * n, dtype)
        x.copy_(xs[me])
        whole, out = self.pool.take("out", sym, total_out, dtype)
        want = torch.full_like(out, poison_value(dtype))
        for s in range(n):
            sd = displs(send[s])[me]
            want[rd[s] : rd[s] + recv[s]] = xs[s][sd : sd + recv[s]]
        kwargs = {"send_displs": displs(send[me]), "recv_displs": rd} if gap else {}
        self.comm.all_to_allv(x, send[me], out, recv, team=self.team, **kwargs)
        assert torch.equal(out, want), f"{what}: data differs"
        untouched(whole, total_out, what)
        self.cases += 1

    def everything(self, counts: list[int], dtypes: list, tag: str, k0: int) -> int:
        """Every collective x dtype x op x count; returns the next case number."""
        k = k0
        for count in counts:
            for dtype in dtypes:
                for op in OPS:
                    self.all_reduce(k, count, dtype, op, tag)
                    self.reduce_scatter(k + 1, count, dtype, op, tag)
                    k += 2
                self.all_gather(k, count, dtype, tag)
                self.broadcast(k + 1, count, dtype, tag)
                self.all_to_all(k + 2, count, dtype, tag)
                self.all_to_allv(k + 3, count, dtype, tag)
                k += 4
        return k


def pool_for(comm: gshmem.Comm, max_count: int) -> Pool:
    n = comm.nranks
    per = (max_count + SLACK) * 8
    return Pool(comm, n * per + 4096, n * per + 4096)


# ---- scenarios -----------------------------------------------------------------------------
def scenario_matrix(comm: gshmem.Comm) -> str:
    pool = pool_for(comm, max(COUNTS) + 3 * comm.nranks)
    check = Checker(comm, pool, None)
    k = 0
    for a, (algo, pull) in enumerate(ALL_REDUCE_PASSES):
        force_algo(algo)
        # Symmetric outputs: direct stores into them at every size on every other pass, staged
        # on the others (ops.cpp re-reads GSHMEM_COLL_DIRECT_MIN at each call).
        os.environ["GSHMEM_COLL_DIRECT_MIN"] = "0" if a % 2 else "never"
        os.environ["GSHMEM_COLL_PULL_MIN"] = pull
        k = check.everything(COUNTS, DTYPES, f"[{algo} direct={a % 2} pull={pull}]", k)
    os.environ.pop("GSHMEM_COLL_DIRECT_MIN")
    os.environ.pop("GSHMEM_COLL_PULL_MIN")
    torch.cuda.synchronize()
    pool.free(comm)
    return f"{check.cases} cases, {len(ALL_REDUCE_PASSES)} all_reduce passes"


def scenario_big(comm: gshmem.Comm) -> str:
    n = comm.nranks
    big = 16 << 20
    pool = Pool(comm, big + 4096, n * big + 4096 * n)
    check = Checker(comm, pool, None)
    k = 1000
    for algo, pull in ALL_REDUCE_PASSES:  # a pulled two-shot of any size is one launch
        force_algo(algo)
        os.environ["GSHMEM_COLL_PULL_MIN"] = pull
        for dtype, op in ((torch.float32, "sum"), (torch.bfloat16, "sum"), (torch.int64, "max")):
            es = torch.empty((), dtype=dtype).element_size()
            count = big // es - SLACK - 5  # not a multiple of anything useful
            check.all_reduce(k, count, dtype, op, f"[{algo} pull={pull}]")
            k += 1
    os.environ.pop("GSHMEM_COLL_PULL_MIN")
    force_algo("one_shot")
    count = big // 4 // n - SLACK - 3
    for _ in range(4):  # every (in place, symmetric) variant: staged and, symmetric, direct
        check.reduce_scatter(k, count, torch.float32, "sum", "[big]")
        check.all_gather(k + 1, big // 4 - SLACK - 3, torch.float32, "[big]")
        check.broadcast(k + 2, big // 4 - SLACK - 3, torch.float32, "[big]")
        check.all_to_all(k + 3, count, torch.int32, "[big]")
        k += 4
    torch.cuda.synchronize()
    pool.free(comm)
    return f"{check.cases} cases of ~16 MiB per PE"


def scenario_teams(comm: gshmem.Comm) -> str:
    n, r = comm.nranks, comm.rank
    world = comm.team_world()
    teams = [
        world.split_strided(r % 2, 2, (n - r % 2 + 1) // 2),  # even or odd PEs
        world.split_strided(r, 1, 1),  # just this PE
    ]
    if n >= 4:
        teams.append(world.split_strided(1, 1, n - 1))  # PE 0 is not a member
    pool = pool_for(comm, 1001 + 3 * n)
    cases = 0
    for a, algo in enumerate(("packet", "one_shot", "two_shot")):
        force_algo(algo)
        for i, team in enumerate(teams):
            if not team.is_member:
                continue
            check = Checker(comm, pool, team)
            tag = f"[{algo} team {team.members()}]"
            # Case numbers (seeds, roots) from the team's place in the list, which every member
            # shares, not from how many cases this PE ran on other teams.
            k = 5000 + (a * len(teams) + i) * 1000
            check.everything([1, 1001], [torch.float32, torch.bfloat16, torch.int64], tag, k)
            cases += check.cases
    torch.cuda.synchronize()
    pool.free(comm)
    return f"{cases} cases on {len(teams)} teams"


STREAM_ROUNDS = 60


def scenario_streams(comm: gshmem.Comm) -> str:
    n, dev = comm.nranks, comm.device
    row, col = comm.team_world().split_2d(2 if n >= 4 else 1)
    counts = [4097, 65537]  # packet and two-shot sizes (auto choice)
    xs_row, xs_col, outs_row, outs_col, gathered = [], [], [], [], []
    want_row, want_col = [], []
    for r in range(STREAM_ROUNDS):
        count = counts[r % 2]
        v = (comm.rank + 1) * (r + 1)
        xs_row.append(torch.full((count,), v, dtype=torch.int64, device=f"cuda:{dev}"))
        xs_col.append(torch.full((count,), v, dtype=torch.int64, device=f"cuda:{dev}"))
        outs_row.append(torch.empty(count, dtype=torch.int64, device=f"cuda:{dev}"))
        outs_col.append(torch.empty(count, dtype=torch.int64, device=f"cuda:{dev}"))
        gathered.append(torch.empty(col.size * 1024, dtype=torch.int64, device=f"cuda:{dev}"))
        want_row.append(sum(m + 1 for m in row.members()) * (r + 1))
        want_col.append(sum(m + 1 for m in col.members()) * (r + 1))
    for name in ("GSHMEM_COLL_ALL_REDUCE_ALGO", "GSHMEM_COLL_ALL_GATHER_ALGO"):
        os.environ.pop(name, None)
    err_row = torch.zeros((), dtype=torch.int64, device=f"cuda:{dev}")
    err_col = torch.zeros((), dtype=torch.int64, device=f"cuda:{dev}")
    want_gather = torch.cat(
        [torch.full((1024,), m + 1, dtype=torch.int64, device=f"cuda:{dev}") for m in col.members()]
    )
    mine = torch.full((1024,), comm.rank + 1, dtype=torch.int64, device=f"cuda:{dev}")
    torch.cuda.synchronize()  # everything above is ready before the two streams use it
    sa, sb = torch.cuda.Stream(dev), torch.cuda.Stream(dev)
    for r in range(STREAM_ROUNDS):
        comm.all_reduce(xs_row[r], out=outs_row[r], team=row, stream=sa)
        with torch.cuda.stream(sa):
            err_row += (outs_row[r] != want_row[r]).sum()
        comm.all_reduce(xs_col[r], out=outs_col[r], team=col, stream=sb)
        comm.all_gather(mine, out=gathered[r], team=col, stream=sb)  # a different schedule
        with torch.cuda.stream(sb):
            err_col += (outs_col[r] != want_col[r]).sum()
            err_col += (gathered[r] != want_gather).sum()
    torch.cuda.synchronize()
    assert err_row.item() == 0 and err_col.item() == 0, (err_row.item(), err_col.item())
    return f"{STREAM_ROUNDS} rounds on rows {row.members()} and columns {col.members()}"


GRAPH_REPLAYS = 50
GRAPH_COUNT = 100_003  # int32: 400 KB, several launches with GSHMEM_COLL_SCRATCH_BYTES=1M


def scenario_graph(comm: gshmem.Comm) -> str:
    n, me, dev = comm.nranks, comm.rank, f"cuda:{comm.device}"
    cnt = GRAPH_COUNT
    root = 1 % n

    def base(m: int, count: int, salt: int) -> torch.Tensor:
        return gen(seed(77, m, salt), count, torch.int32, "sum", dev)

    mine = base(me, cnt, 1)
    mine_wide = base(me, n * cnt, 2)
    sum_base = torch.stack([base(m, cnt, 1) for m in range(n)]).sum(0).to(torch.int32)
    gather_base = torch.cat([base(m, cnt, 1) for m in range(n)])
    rs_base = (
        torch.stack([base(m, n * cnt, 2)[me * cnt : (me + 1) * cnt] for m in range(n)])
        .sum(0)
        .to(torch.int32)
    )
    a2a_base = torch.cat([base(m, n * cnt, 2)[me * cnt : (me + 1) * cnt] for m in range(n)])
    root_base = base(root, cnt, 1)
    x = torch.empty_like(mine)
    x_wide = torch.empty_like(mine_wide)
    sym = comm.empty((n * cnt,), torch.int32)  # a symmetric input too
    outs = {a: torch.empty_like(mine) for a in ("packet", "one_shot", "two_shot")}
    gathered = torch.empty(n * cnt, dtype=torch.int32, device=dev)
    scattered = torch.empty(cnt, dtype=torch.int32, device=dev)
    bcast = torch.empty(cnt, dtype=torch.int32, device=dev)
    a2a = torch.empty(n * cnt, dtype=torch.int32, device=dev)
    # Symmetric outputs: the direct paths (400 KB is above GSHMEM_COLL_DIRECT_MIN's default).
    sym_reduced = comm.empty((cnt,), torch.int32)
    sym_gathered = comm.empty((n * cnt,), torch.int32)
    sym_bcast = comm.empty((cnt,), torch.int32)
    sym_a2a = comm.empty((n * cnt,), torch.int32)
    sym_pulled = comm.empty((cnt,), torch.int32)  # symmetric in and out: the pulled two-shot
    it = torch.zeros((), dtype=torch.int32, device=dev)
    errors = torch.zeros((), dtype=torch.int64, device=dev)

    def body() -> None:
        it.add_(1)
        torch.add(mine, it, out=x)
        torch.add(mine_wide, it, out=x_wide)
        sym.copy_(x_wide)
        for algo, out in outs.items():
            os.environ["GSHMEM_COLL_ALL_REDUCE_ALGO"] = algo  # read now, at capture
            comm.all_reduce(x, out=out)
            errors.add_((out != sum_base + n * it).sum())
        sym_pulled.copy_(x)  # two-shot (the last algorithm above), in place
        comm.all_reduce(sym_pulled)
        errors.add_((sym_pulled != sum_base + n * it).sum())
        comm.all_gather(x, out=gathered)
        errors.add_((gathered != gather_base + it).sum())
        comm.reduce_scatter(sym, out=scattered)
        errors.add_((scattered != rs_base + n * it).sum())
        comm.broadcast(x, root, out=bcast)
        errors.add_((bcast != root_base + it).sum())
        comm.all_to_all(x_wide, out=a2a)
        errors.add_((a2a != a2a_base + it).sum())
        os.environ["GSHMEM_COLL_ALL_REDUCE_ALGO"] = "two_shot"
        comm.all_reduce(x, out=sym_reduced)
        errors.add_((sym_reduced != sum_base + n * it).sum())
        comm.all_gather(x, out=sym_gathered)
        errors.add_((sym_gathered != gather_base + it).sum())
        comm.broadcast(x, root, out=sym_bcast)
        errors.add_((sym_bcast != root_base + it).sum())
        comm.all_to_all(x_wide, out=sym_a2a)
        errors.add_((sym_a2a != a2a_base + it).sum())

    torch.cuda.synchronize()
    body()  # eager once
    torch.cuda.synchronize()
    assert errors.item() == 0, f"{errors.item()} elements differ (eager)"
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        body()
    for _ in range(GRAPH_REPLAYS):
        graph.replay()
    torch.cuda.synchronize()
    assert it.item() == GRAPH_REPLAYS + 1, it.item()
    assert errors.item() == 0, f"{errors.item()} elements differ over {GRAPH_REPLAYS} replays"
    for t in (sym_pulled, sym_a2a, sym_bcast, sym_gathered, sym_reduced, sym):
        comm.free(t)
    return f"{GRAPH_REPLAYS} replays, count {cnt}"


PERMUTE_ROUNDS = 300
# bfloat16 elements, 2 B .. 2.2 MB: packets within one 256 KiB chunk, and from the default
# GSHMEM_PERMUTE_BULK_MIN (512 KiB) bulk messages of one 2 MiB chunk (600 KB) and of two (2.2 MB,
# the second one partial, an odd count)
PERMUTE_COUNTS = [1, 3, 4, 50, 2049, 32768, 40000, 300000, 1100001]


def _permutes(n: int, me: int) -> list[tuple[str, int, int]]:
    """(name, dst, src) of this PE in every permutation the permute scenario mixes."""
    out = [(f"shift {s}", (me + s) % n, (me - s) % n) for s in range(1, n)]
    out.append(("identity", me, me))
    out.append(("partial", me + 1 if me + 1 < n else -1, me - 1))  # PE 0 receives nothing
    if n % 2 == 0:
        out.append(("swap", me ^ 1, me ^ 1))
    return out


def _permute_data(round_: int, pe: int, count: int, dev: str) -> torch.Tensor:
    g = torch.Generator(device=dev).manual_seed(seed(41, round_, pe))
    bits = torch.randint(-(1 << 15), 1 << 15, (count,), generator=g, device=dev)
    return bits.to(torch.int16).view(torch.bfloat16)


def _bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.view(torch.int16), b.view(torch.int16))


def _mixed_permutes(comm: gshmem.Comm, rounds: int, counts: list[int], outs: list) -> None:
    """A random sequence (the same on every PE) of permutations and sizes, enqueued without
    waiting so that senders run ahead of receivers, each output checked bit for bit with its
    poisoned slack. outs[r]: an int16 tensor of at least the largest count + SLACK elements."""
    n, me, dev = comm.nranks, comm.rank, f"cuda:{comm.device}"
    perms = _permutes(n, me)
    rng = random.Random(seed(43, n, rounds))
    plan = [(rng.randrange(len(perms)), rng.choice(counts)) for _ in range(rounds)]
    ins = [_permute_data(r, me, count, dev) for r, (_, count) in enumerate(plan)]
    for out in outs:
        out.fill_(-7)
    torch.cuda.synchronize()
    for r, (k, count) in enumerate(plan):
        _, dst, src = perms[k]
        comm.permute(ins[r], dst, src, out=outs[r][:count].view(torch.bfloat16))
    torch.cuda.synchronize()
    for r, (k, count) in enumerate(plan):
        name, _, src = perms[k]
        want = (torch.zeros(count, dtype=torch.int16, device=dev) if src < 0
                else _permute_data(r, src, count, dev).view(torch.int16))  # fmt: skip
        got = outs[r][: count + SLACK]
        assert torch.equal(got[:count], want), (r, name, count, me)
        assert bool((got[count:] == -7).all()), f"round {r} ({name}) wrote past its {count}"


# The collectives' packets share the permute's slots and counters (kernels.h: reduce_packets,
# move_packets): int32 elements, within one chunk (65536) and over it.
PACKET_COUNTS = [1, 3, 640, 65536, 70001]


def _packet_data(round_: int, pe: int, count: int, dev: str) -> torch.Tensor:
    g = torch.Generator(device=dev).manual_seed(seed(47, round_, pe))
    return torch.randint(-(1 << 20), 1 << 20, (count,), generator=g, device=dev, dtype=torch.int32)


def _permutes_and_packets(comm: gshmem.Comm, rounds: int) -> None:
    """A random sequence (the same on every PE) of permutes and the collectives' packets (forced:
    all_reduce, reduce_scatter, all_gather, all_to_all), enqueued without waiting; every result
    checked exactly afterwards. Each call advances the counters of the regions it reaches, so a
    wrong count on either side shows as a wrong value or a wait that never ends."""
    n, me, dev = comm.nranks, comm.rank, f"cuda:{comm.device}"
    perms = _permutes(n, me)
    rng = random.Random(seed(53, n, rounds))
    kinds = ("permute", "all_reduce", "reduce_scatter", "all_gather", "all_to_all")
    plan = [(rng.choice(kinds), rng.randrange(len(perms)), rng.choice(PACKET_COUNTS))
            for _ in range(rounds)]  # fmt: skip
    forced = {f"GSHMEM_COLL_{kind.upper()}_ALGO": "packet" for kind in kinds[1:]}
    with environment(forced):
        torch.cuda.synchronize()
        results = []
        for r, (kind, k, count) in enumerate(plan):
            if kind == "permute":
                _, dst, src = perms[k]
                results.append(comm.permute(_packet_data(r, me, count, dev), dst, src))
            elif kind == "all_reduce":
                results.append(comm.all_reduce(_packet_data(r, me, count, dev)))
            elif kind == "reduce_scatter":
                results.append(comm.reduce_scatter(_packet_data(r, me, n * count, dev)))
            elif kind == "all_gather":
                results.append(comm.all_gather(_packet_data(r, me, count, dev)).flatten())
            else:
                results.append(comm.all_to_all(_packet_data(r, me, n * count, dev)))
        torch.cuda.synchronize()
    for r, ((kind, k, count), got) in enumerate(zip(plan, results, strict=True)):
        if kind == "permute":
            src = perms[k][2]
            want = (torch.zeros(count, dtype=torch.int32, device=dev) if src < 0
                    else _packet_data(r, src, count, dev))  # fmt: skip
        elif kind == "all_reduce":
            want = sum(_packet_data(r, pe, count, dev) for pe in range(n))
        elif kind == "reduce_scatter":
            want = sum(_packet_data(r, pe, n * count, dev)[me * count : (me + 1) * count]
                       for pe in range(n))  # fmt: skip
        elif kind == "all_gather":
            want = torch.cat([_packet_data(r, pe, count, dev) for pe in range(n)])
        else:
            want = torch.cat([_packet_data(r, pe, n * count, dev)[me * count : (me + 1) * count]
                              for pe in range(n)])  # fmt: skip
        assert torch.equal(got, want), (r, kind, count, me)


def scenario_permute(comm: gshmem.Comm) -> str:
    """gshmem_permute_on_stream into ordinary tensors (the kernel: packets and bulk, by size;
    test_coll.py also runs it with every size on one of them): _mixed_permutes (the credits let
    senders run ahead); then a captured graph of permutes replayed on new data; then bad
    arguments."""
    n, me, dev = comm.nranks, comm.rank, f"cuda:{comm.device}"
    outs = [torch.empty(max(PERMUTE_COUNTS) + SLACK, dtype=torch.int16, device=dev)
            for _ in range(PERMUTE_ROUNDS)]  # fmt: skip
    _mixed_permutes(comm, PERMUTE_ROUNDS, PERMUTE_COUNTS, outs)
    _permutes_and_packets(comm, PERMUTE_ROUNDS // 3)

    # a graph of three permutes in both directions, replayed on new inputs
    x = torch.empty(150000, dtype=torch.bfloat16, device=dev)  # bulk, or two chunks of packets
    small = torch.empty(3, dtype=torch.bfloat16, device=dev)
    right, left = (me + 1) % n, (me - 1) % n
    stream = torch.cuda.Stream(comm.device)
    with torch.cuda.stream(stream):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            a = comm.permute(x, right, left)
            b = comm.permute(a, left, right)  # back where it came from
            c = comm.permute(small, right, left)
    for rep in range(20):
        x.copy_(_permute_data(1000 + rep, me, x.numel(), dev))
        small.copy_(_permute_data(2000 + rep, me, 3, dev))
        graph.replay()
        torch.cuda.synchronize()
        # bit for bit: random bf16 bits include NaNs, which torch.equal never calls equal
        assert _bits_equal(a, _permute_data(1000 + rep, left, x.numel(), dev)), rep
        assert _bits_equal(b, x), rep
        assert _bits_equal(c, _permute_data(2000 + rep, left, 3, dev)), rep

    other = (me + 1) % n
    expect_usage(lambda: comm.permute(small, me, other), "not both")
    expect_usage(lambda: comm.permute(small, n, -1), "is not a PE")
    expect_usage(lambda: comm.permute(small, -2, -1), "use -1 for none")
    expect_usage(lambda: comm.permute(small.double(), other, -1), "collectives take")
    torch.cuda.synchronize()
    comm.barrier()  # no PE leaves while another still polls its packets
    kinds = len(_permutes(n, me))
    return (f"{PERMUTE_ROUNDS} mixed permutes of {kinds} kinds, {PERMUTE_ROUNDS // 3} permutes "
            "mixed with packet collectives, 20 graph replays, bad args")  # fmt: skip


def scenario_permute_copy(comm: gshmem.Comm) -> str:
    """gshmem_permute_on_stream into symmetric outputs, run with GSHMEM_PERMUTE_COPY_MIN=64K: the
    copy-engine path from 64 KiB (every PE's flags handshake, then a copy straight into the
    receiver's out), packets below it, mixed in one random sequence; then a CUDA graph of
    copy-engine permutes there and back, replayed on new data; then one at the default line
    (16 MiB) and an in-place one (the kernel: bulk)."""
    n, me, dev = comm.nranks, comm.rank, f"cuda:{comm.device}"
    path = gshmem._C.permute_path
    assert path(64 * 1024, True) == "copy_engine" != path(65534, True)
    counts = [*PERMUTE_COUNTS, 1 << 20]  # 32768 elements and up: 64 KiB and more, copy engine
    rounds = 120
    outs = [comm.empty((max(counts) + SLACK,), torch.int16) for _ in range(rounds)]
    _mixed_permutes(comm, rounds, counts, outs)

    right, left = (me + 1) % n, (me - 1) % n
    x = torch.empty(150000, dtype=torch.bfloat16, device=dev)
    there, back = (comm.empty((x.numel(),), torch.bfloat16) for _ in range(2))
    stream = torch.cuda.Stream(comm.device)
    with torch.cuda.stream(stream):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            comm.permute(x, right, left, out=there)
            comm.permute(there, left, right, out=back)
    for rep in range(20):
        x.copy_(_permute_data(3000 + rep, me, x.numel(), dev))
        graph.replay()
        torch.cuda.synchronize()
        assert _bits_equal(there, _permute_data(3000 + rep, left, x.numel(), dev)), rep
        assert _bits_equal(back, x), rep

    os.environ.pop("GSHMEM_PERMUTE_COPY_MIN")
    big = comm.empty((8 << 20,), torch.int16)  # 16 MiB: the default line
    src = _permute_data(4000, me, big.numel(), dev)
    comm.permute(src, right, left, out=big.view(torch.bfloat16))
    torch.cuda.synchronize()
    assert _bits_equal(big, _permute_data(4000, left, big.numel(), dev))
    big.copy_(src.view(torch.int16))
    in_place = big.view(torch.bfloat16)
    comm.permute(in_place, right, left, out=in_place)  # in place: the kernel (bulk)
    torch.cuda.synchronize()
    assert _bits_equal(big, _permute_data(4000, left, big.numel(), dev))
    comm.barrier()
    for t in (*outs, there, back, big):
        comm.free(t)
    return f"{rounds} mixed permutes into symmetric outputs, 20 graph replays, 16 MiB, in place"


def scenario_exchange(comm: gshmem.Comm) -> str:
    """The collectives that only move bytes, and permutes, as exchanges into symmetric outputs
    (exchange.cpp): through the proxy under GSHMEM_TRANSPORT=proxy (a team beyond reach, no
    NCCL), else forced by GSHMEM_COLL_<OP>_ALGO=exchange (copy-engine puts between NVLink
    peers). Random data each round, outputs poisoned first, one element to 1 MiB per member,
    every root of a broadcast, a ring permute both ways, an all_gather captured in a CUDA graph
    and replayed on new data; then the outputs and operations it refuses."""
    n, me, d = comm.nranks, comm.rank, f"cuda:{comm.device}"
    proxy = os.environ.get("GSHMEM_TRANSPORT") == "proxy"
    if not proxy:
        for op in ("ALL_GATHER", "ALL_TO_ALL", "BROADCAST"):
            os.environ[f"GSHMEM_COLL_{op}_ALGO"] = "exchange"
    poison = -0x5A5A5A5B

    def data(seed_: int, pe: int, count: int) -> torch.Tensor:
        g = torch.Generator(device=d).manual_seed(seed(61, seed_, pe))
        return torch.randint(-(1 << 30), 1 << 30, (count,), generator=g, device=d,
                             dtype=torch.int32)  # fmt: skip

    counts = (1, 1000, 65536, 1 << 18)
    for rnd, count in enumerate(counts):
        x = comm.empty((count * n,), torch.int32)
        out = comm.empty((count * n,), torch.int32)
        x[:count].copy_(data(rnd, me, count))
        out.fill_(poison)
        comm.all_gather(x[:count], out=out)
        torch.cuda.synchronize()
        want = torch.cat([data(rnd, q, count) for q in range(n)])
        assert torch.equal(out, want), f"all_gather of {count}, round {rnd}"
        x.copy_(data(rnd + 50, me, count * n))
        out.fill_(poison)
        comm.all_to_all(x, out=out)
        torch.cuda.synchronize()
        want = torch.cat([data(rnd + 50, q, count * n)[me * count : (me + 1) * count]
                          for q in range(n)])  # fmt: skip
        assert torch.equal(out, want), f"all_to_all of {count} per member, round {rnd}"
        for root in range(n):
            y = out[:count]
            y.copy_(data(rnd + 100 + root, me, count))
            comm.broadcast(y, root)
            torch.cuda.synchronize()
            assert torch.equal(y, data(rnd + 100 + root, root, count)), f"broadcast from {root}"
        right, left = (me + 1) % n, (me - 1) % n
        for dst, src in ((right, left), (left, right)):
            x[:count].copy_(data(rnd + 200 + dst, me, count))
            out.fill_(poison)
            comm.permute(x[:count], dst, src, out=out[:count])
            torch.cuda.synchronize()
            assert torch.equal(out[:count], data(rnd + 200 + me, src, count)), "permute"
        comm.barrier()  # nobody frees what a peer may still write
        comm.free(out)
        comm.free(x)

    count = 4096
    x, out = comm.empty((count,), torch.int32), comm.empty((count * n,), torch.int32)
    stream = torch.cuda.Stream(comm.device)
    with torch.cuda.stream(stream):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            comm.all_gather(x, out=out)
    for rep in range(3):
        x.copy_(data(900 + rep, me, count))
        out.fill_(poison)
        graph.replay()
        torch.cuda.synchronize()
        want = torch.cat([data(900 + rep, q, count) for q in range(n)])
        assert torch.equal(out, want), f"graph replay {rep}"

    plain = torch.zeros(count * n, dtype=torch.int32, device=d)
    expect_usage(lambda: comm.all_gather(x, out=plain), "needs a symmetric out")
    if proxy:
        expect_usage(lambda: comm.permute(x, (me + 1) % n, (me - 1) % n, out=x), "proxy path")
        _exchange_reductions(comm, data)
    comm.barrier()
    comm.free(out)
    comm.free(x)
    where = "through the proxy, and the reductions" if proxy else "by GSHMEM_COLL_<OP>_ALGO"
    return f"all_gather, all_to_all, broadcast, permute {where}: {len(counts)} sizes, a graph"


def _exchange_reductions(comm: gshmem.Comm, data) -> None:
    """all_reduce and reduce_scatter through the proxy (staged in the exchange slots: run with a
    small GSHMEM_COLL_SCRATCH_BYTES, so that large calls go in several pieces and a piece's
    shards may be empty): int32 sum and max, exact; into ordinary and symmetric outputs, in place
    and not, counts smaller than the team and not divisible by it."""
    n, me, d = comm.nranks, comm.rank, f"cuda:{comm.device}"
    for rnd, count in enumerate((1, 2, 1001, 300_007)):
        for op in ("sum", "max"):
            # |values| < 2^22: sums of up to 512 members stay exact in int32
            inputs = [data(500 + rnd, q, count * n) >> 8 for q in range(n)]
            stacked = torch.stack([t.long() for t in inputs])
            whole = stacked.sum(0) if op == "sum" else stacked.max(0).values
            length = count * n - (n - 1)  # not a multiple of n: the last shards short or empty
            mine = inputs[me][:length].clone()
            out = torch.full_like(mine, -7)
            comm.all_reduce(mine, out=out, op=op)
            torch.cuda.synchronize()
            assert torch.equal(out.long(), whole[:length]), f"all_reduce {op} of {length}"
            sym = comm.empty((count * n,), torch.int32)
            sym.copy_(inputs[me])
            comm.all_reduce(sym, op=op)  # in place, symmetric
            torch.cuda.synchronize()
            assert torch.equal(sym.long(), whole), f"all_reduce {op} in place"
            part = torch.full((count,), -7, dtype=torch.int32, device=d)
            comm.reduce_scatter(inputs[me], out=part, op=op)
            torch.cuda.synchronize()
            assert torch.equal(part.long(), whole[me * count : (me + 1) * count]), "reduce_scatter"
            comm.barrier()
            comm.free(sym)


def scenario_badargs(comm: gshmem.Comm) -> str:
    n, dev = comm.nranks, f"cuda:{comm.device}"
    x = torch.ones(1024, dtype=torch.float32, device=dev)
    out = torch.empty(1024, dtype=torch.float32, device=dev)
    h = comm._handle
    world = comm.team_world()
    checks = [
        (lambda: comm.all_reduce(x.double()), ["collectives take"]),
        (lambda: comm.all_reduce(x, op="avg"), ["op must be one of"]),
        (lambda: comm.all_reduce(x, out=out.half()), ["must match"]),
        (lambda: comm.all_reduce(x, out=out[:10]), ["it must have 1024"]),
        (lambda: comm.all_reduce(x.view(32, 32)[:, ::2]), ["contiguous"]),
        (lambda: comm.all_reduce(x.cpu()), ["cuda:"]),
        (lambda: comm.all_reduce([1.0]), ["torch.Tensor"]),
        (lambda: comm.all_reduce(x[0:100], out=x[50:150]), ["overlap"]),
        (lambda: comm.broadcast(x, n), ["root", "out of range"]),
        (lambda: comm.all_reduce(x, team="world"), ["gshmem.Team"]),
        (lambda: comm.all_to_allv(x, [1] * (n + 1), out, [1] * n), ["entries"]),
        (lambda: comm.all_to_allv(x, [1] * n, out, [1] * n, send_displs=[2000] * n), ["reach"]),
        (
            lambda: gshmem._C.all_reduce_on_stream(
                h, None, x.data_ptr(), out.data_ptr(), 8, 9, 0, 0
            ),
            ["not a gshmem_dtype_t"],
        ),
        (
            lambda: gshmem._C.all_reduce_on_stream(
                h, None, x.data_ptr(), out.data_ptr(), 8, 0, 9, 0
            ),
            ["not a reduction"],
        ),
        (
            lambda: gshmem._C.all_gather_on_stream(h, None, 0, out.data_ptr(), 8, 0, 0),
            ["in is NULL"],
        ),
        (
            lambda: gshmem._C.all_reduce_on_stream(
                h, None, x.data_ptr() + 2, out.data_ptr(), 8, 0, 0, 0
            ),
            ["aligned"],
        ),
        (
            lambda: gshmem._C.all_reduce_on_stream(
                h, (0, 1, n + 1, comm.rank), x.data_ptr(), out.data_ptr(), 8, 0, 0, 0
            ),
            ["is not a non-empty team"],
        ),
    ]
    if n > 1:
        other = world.split_strided((comm.rank + 1) % n, 1, 1)  # a team without this PE
        huge = 16 << 20  # more than one staging slot (8 MiB at most by default)
        big_in = torch.empty(huge // 4 * n, dtype=torch.float32, device=dev)
        sc = [huge // 4 if m != comm.rank else 0 for m in range(n)]
        checks += [
            (lambda: comm.all_reduce(x, team=other), ["not a member"]),
            (lambda: comm.reduce_scatter(x[: n * 3 + 1]), ["not a multiple of the team size"]),
            (lambda: comm.all_to_all(x[: n * 3 + 1]), ["not a multiple of the team size"]),
            (lambda: comm.all_to_allv(big_in, sc, big_in[:1].clone(), [0] * n), ["staging slot"]),
            (lambda: comm.all_to_allv(x, [1] * n, out, [2] * n), ["must match"]),
        ]
    for fn, fragments in checks:
        expect_usage(fn, *fragments)
    # The comm still works; zero elements enqueue nothing.
    comm.all_reduce(x[:0])
    x.fill_(comm.rank + 1)
    comm.all_reduce(x, out=out)
    torch.cuda.synchronize()
    assert bool((out == n * (n + 1) / 2).all().item())
    return f"{len(checks)} bad calls refused"


def scenario_mismatch(comm: gshmem.Comm) -> str:
    assert os.environ.get("GSHMEM_COLL_CHECK") == "1"
    pool = pool_for(comm, 1001 + 3 * comm.nranks)
    check = Checker(comm, pool, None)
    for a, algo in enumerate(("one_shot", "two_shot")):
        force_algo(algo)
        check.everything([1001], [torch.float32, torch.int64], f"[{algo} checked]", 9000 + a * 100)
    torch.cuda.synchronize()
    force_algo("one_shot")  # packet all_reduce has no signal phase, so no check
    x = torch.ones(1001 + (comm.rank == 0), device=f"cuda:{comm.device}")
    comm.all_reduce(x)
    try:
        torch.cuda.synchronize()
    except RuntimeError as e:
        first = str(e).strip().splitlines()[0]
        print(
            f"PASS mismatch rank {comm.rank}/{comm.nranks}: {check.cases} checked cases passed; "
            f"the mismatched call trapped ({first})",
            flush=True,
        )
        os._exit(0)  # the context is unusable: no finalize
    raise AssertionError("an all_reduce with mismatched counts ran to completion")


def main(scenarios: dict | None = None) -> None:
    """Runs scenario argv[1]: scenario_<name> of this module, or scenarios[name] (another
    script's table); a failure exits non-zero and the launcher stops the other PEs."""
    scenario = sys.argv[1]
    comm = gshmem.init()
    torch.cuda.set_device(comm.device)
    run = scenarios[scenario] if scenarios else globals()[f"scenario_{scenario}"]
    msg = run(comm)
    comm.finalize()
    print(f"PASS {scenario} rank {comm.rank}/{comm.nranks}: {msg}", flush=True)


if __name__ == "__main__":
    main()
