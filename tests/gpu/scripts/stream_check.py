"""GPU checks of the on-stream operations, run as one rank of `python -m gshmem.run -n N`.

Usage: stream_check.py SCENARIO
  rma       put/get 1 B .. 64 MiB, odd sizes, misaligned offsets, to the right / from the left
            neighbour and to/from itself, against references (fresh random data, poisoned
            destinations, bytes around the destination untouched); put_2d of head and token
            slices
  stress    2000 rounds of ring put_signal (SET and ADD) + wait + check, all on the stream with
            no host synchronisation inside the loop: data must be visible before its signal
  cmp       every wait comparison (memory-operation and kernel paths), each satisfied only by a
            peer's signal that arrives late
  graph     a CUDA graph of put_signal + wait + check + barrier_on_stream + get rounds between
            all PEs, replayed 120 times, checked on the device
  streams   two streams issuing rings in opposite directions concurrently
  badargs   bad arguments raise gshmem.UsageError; the comm works afterwards
  nop2p     (GSHMEM_DISABLE_P2P=1) peers are refused with a clear error; the PE itself works
Set GSHMEM_STREAM_KERNEL_MAX_BYTES to run the same checks through the small-message kernels.
Prints "PASS <scenario> ..." on success; any failure raises (non-zero exit).
"""

from __future__ import annotations

import os
import sys

import torch
from expect import expect_usage

import gshmem

POISON = 0xA5


def pattern(seed: int, nbytes: int, device: int) -> torch.Tensor:
    """nbytes of random uint8 that any PE can regenerate from the seed."""
    g = torch.Generator(device=f"cuda:{device}").manual_seed(seed)
    return torch.randint(0, 256, (nbytes,), generator=g, device=f"cuda:{device}", dtype=torch.uint8)


def seed(*parts: int) -> int:
    s = 0
    for p in parts:
        s = (s * 1_000_003 + p) % (1 << 62)
    return s


def sync(comm: gshmem.Comm) -> None:
    torch.cuda.synchronize(comm.device)
    comm.barrier()


def untouched(t: torch.Tensor) -> bool:
    return bool((t == POISON).all().item())


def neighbours(comm: gshmem.Comm) -> tuple[int, int]:
    return (comm.rank + 1) % comm.nranks, (comm.rank - 1) % comm.nranks


def signed(v: int) -> int:
    """The int64 with the same bits as unsigned v (to store it in an int64 tensor)."""
    return v - (1 << 64) if v >= 1 << 63 else v


def unsigned(v: int) -> int:
    return v + (1 << 64) if v < 0 else v


# ---- rma -----------------------------------------------------------------------------------
SIZES = [1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 255, 256, 4095, 4097, 65537, (1 << 20) + 3]
SIZES += [(16 << 20) + 1, 64 << 20]
OFFSETS = [(0, 0), (1, 3), (8, 0), (3, 16)]  # (destination, source) byte offsets
SLACK = 64


def rma_case(comm, inbox, mine, src, got, size, doff, soff, salt, pe_put, pe_get) -> None:
    me, dev = comm.rank, comm.device
    n = soff + size
    src[:n].copy_(pattern(seed(salt, me, 1), n, dev))
    mine[:n].copy_(pattern(seed(salt, me, 2), n, dev))
    inbox[: doff + size + SLACK].fill_(POISON)
    got[: doff + size + SLACK].fill_(POISON)
    sync(comm)
    comm.put(inbox[doff : doff + size], src[soff : soff + size], pe_put)
    comm.get(got[doff : doff + size], mine[soff : soff + size], pe_get)
    comm.quiet()
    sync(comm)
    writer = (me - 1) % comm.nranks if pe_put != me else me
    want_put = pattern(seed(salt, writer, 1), n, dev)[soff:]
    want_get = pattern(seed(salt, pe_get, 2), n, dev)[soff:]
    what = f"size {size} offsets {doff}/{soff} put->{pe_put} get<-{pe_get}"
    assert torch.equal(inbox[doff : doff + size], want_put), f"put data differs: {what}"
    assert torch.equal(got[doff : doff + size], want_get), f"get data differs: {what}"
    assert untouched(inbox[:doff]) and untouched(inbox[doff + size : doff + size + SLACK]), (
        f"put wrote outside its range: {what}"
    )
    assert untouched(got[:doff]) and untouched(got[doff + size : doff + size + SLACK]), (
        f"get wrote outside its range: {what}"
    )


def scenario_rma(comm: gshmem.Comm) -> str:
    right, left = neighbours(comm)
    cap = max(SIZES) + 16 + SLACK
    inbox = comm.empty((cap,), torch.uint8)
    mine = comm.empty((cap,), torch.uint8)
    src = torch.empty(cap, dtype=torch.uint8, device=f"cuda:{comm.device}")
    got = torch.empty(cap, dtype=torch.uint8, device=f"cuda:{comm.device}")
    cases = 0
    for i, size in enumerate(SIZES):
        for j, (doff, soff) in enumerate(OFFSETS):
            rma_case(comm, inbox, mine, src, got, size, doff, soff, seed(i, j), right, left)
            cases += 1
    for size in (5, 65536 + 7):  # to and from this PE itself
        rma_case(comm, inbox, mine, src, got, size, 1, 2, seed(99, size), comm.rank, comm.rank)
        cases += 1
    # Typed, multi-dimensional tensors and Buffers: only their bytes matter.
    t = comm.empty((257, 129), torch.bfloat16)
    local = pattern(seed(7, comm.rank), t.numel() * 2, comm.device).view(torch.bfloat16)
    t.view(torch.uint8).view(-1).fill_(POISON)
    buf = comm.malloc(1000)
    torch.from_dlpack(buf).fill_(POISON)
    sync(comm)
    comm.put(t, local.view(257, 129), right)
    comm.put(buf, local.view(torch.uint8)[:1000], right)
    sync(comm)
    want = pattern(seed(7, left), t.numel() * 2, comm.device)
    assert torch.equal(t.view(torch.uint8).view(-1), want), "typed put differs"
    assert torch.equal(torch.from_dlpack(buf), want[:1000]), "Buffer put differs"
    comm.free(buf)
    comm.free(t)
    cases += put_2d_cases(comm, right, left)
    return f"{cases} cases, kernel threshold {gshmem._C.stream_kernel_max_bytes()} B"


def put_2d_cases(comm: gshmem.Comm, right: int, left: int) -> int:
    """put_2d: slices of heads and of tokens of [batch, heads, seq, dim] tensors, stored
    head-major or sequence-major, land on the right neighbour where ``dst.copy_(src)`` would put
    them; the bytes around them stay poisoned."""
    b, h, s, d = 2, 8, 96, 64
    heads_major = comm.empty((b, h // 2, 2 * s, d), torch.bfloat16)  # 4 heads, 2x the tokens
    seq_major = comm.empty((b, 2 * s, h // 2, d), torch.bfloat16)
    cases = [  # (destination tensor, its view, source view of x), x stored as sequence-major?
        (heads_major, lambda w: w[1, :, s + 5 : s + 37], lambda x: x[1, 4:8, 5:37], False),
        (heads_major, lambda w: w[0, 1:3, :s], lambda x: x[0, 2:4], False),
        (seq_major, lambda w: w[1, 7:70], lambda x: x.transpose(1, 2)[1, 7:70, 0:4], True),
        (seq_major, lambda w: w[0, s:], lambda x: x.transpose(1, 2)[0, :, 4:8], True),
    ]

    def source(rank: int, i: int, seq: bool) -> torch.Tensor:
        x = pattern(seed(50, i, rank), b * h * s * d * 2, comm.device).view(torch.bfloat16)
        if seq:  # the same shape stored [batch, seq, heads, dim]
            return x.view(b, s, h, d).transpose(1, 2)
        return x.view(b, h, s, d)

    for i, (whole, dst_of, src_of, seq) in enumerate(cases):
        whole.view(torch.uint8).view(-1).fill_(POISON)
        sync(comm)
        comm.put_2d(dst_of(whole), src_of(source(comm.rank, i, seq)), right)
        sync(comm)
        want = torch.empty_like(whole)
        want.view(torch.uint8).view(-1).fill_(POISON)
        dst_of(want).copy_(src_of(source(left, i, seq)))
        assert torch.equal(whole.view(torch.int16), want.view(torch.int16)), f"put_2d case {i}"
    comm.free(seq_major)
    comm.free(heads_major)
    return len(cases)


# ---- stress --------------------------------------------------------------------------------
ROUNDS = 2000
SLOT = 16384


def scenario_stress(comm: gshmem.Comm) -> str:
    right, left = neighbours(comm)
    dev = comm.device
    total = ROUNDS * SLOT
    src = pattern(seed(11, comm.rank), total, dev)
    expected = pattern(seed(11, left), total, dev)
    inbox = comm.empty((total,), torch.uint8)
    inbox.fill_(POISON)
    sigs = comm.zeros((2,), torch.int64)  # [SET rounds, ADD rounds]
    errors = torch.zeros((), dtype=torch.int64, device=f"cuda:{dev}")
    sync(comm)
    adds = 0
    for r in range(ROUNDS):
        size = 1 + (r * 7919) % SLOT
        lo, hi = r * SLOT, r * SLOT + size
        if r % 2 == 0:
            comm.put_signal(inbox[lo:hi], src[lo:hi], sigs[0:1], r + 1, right, op="set")
            comm.signal_wait_until(sigs[0:1], "ge", r + 1)
        else:
            adds += 1
            comm.put_signal(inbox[lo:hi], src[lo:hi], sigs[1:2], 1, right, op="add")
            comm.signal_wait_until(sigs[1:2], "ge", adds)
        errors += (inbox[lo:hi] != expected[lo:hi]).sum()
    sync(comm)
    assert errors.item() == 0, f"{errors.item()} bytes seen before their signal's data arrived"
    assert sigs.tolist() == [ROUNDS - 1, adds], sigs.tolist()
    return f"{ROUNDS} rounds, kernel threshold {gshmem._C.stream_kernel_max_bytes()} B"


# ---- cmp -----------------------------------------------------------------------------------
BIG = 1 << 63
# (cmp, value, initial signal, signal op, operand): the initial value does not satisfy the
# comparison, the update from the left neighbour does.
CMP_CASES = [
    ("eq", 5, 4, "set", 5),
    ("ne", 7, 7, "set", 9),
    ("gt", 10, 10, "set", 11),
    ("ge", 10, 9, "set", 10),
    ("lt", 10, 10, "set", 3),
    ("le", 10, 11, "set", 10),
    ("eq", 5, 2, "add", 3),
    ("ge", 12, 2, "add", 10),
    ("ge", BIG - 1, BIG - 2, "set", BIG - 1),  # largest GE on the memory-operation path
    ("gt", BIG - 1, BIG - 1, "set", BIG),  # GT that needs the kernel
    ("ge", BIG + 5, BIG + 4, "set", BIG + 5),  # GE beyond 2^63: kernel, unsigned
    ("gt", BIG, BIG, "set", BIG + 1),
    ("lt", BIG, (1 << 64) - 1, "set", 0),
    ("ne", 0, 0, "add", 1),
]
CMP_BYTES = 4096 + 3
SLEEP_CYCLES = 4_000_000  # ~2 ms per signal: the waiter reaches its wait first


def scenario_cmp(comm: gshmem.Comm) -> str:
    right, left = neighbours(comm)
    dev = comm.device
    k = len(CMP_CASES)
    sigs = comm.zeros((k,), torch.int64)
    inbox = comm.empty((k * CMP_BYTES,), torch.uint8)
    src = pattern(seed(21, comm.rank), k * CMP_BYTES, dev)
    out = torch.full((k * CMP_BYTES,), POISON, dtype=torch.uint8, device=f"cuda:{dev}")
    inbox.fill_(POISON)
    sigs.copy_(torch.tensor([signed(c[2]) for c in CMP_CASES], dtype=torch.int64))
    sync(comm)
    waiter, signaller = torch.cuda.Stream(dev), torch.cuda.Stream(dev)
    # The signals are enqueued first (so they never sit behind a wait, even where the two streams
    # share a hardware queue), each after a sleep, so the waiter reaches each wait before its
    # signal comes.
    with torch.cuda.stream(signaller):
        for i, (_, _, _, op, operand) in enumerate(CMP_CASES):
            lo, hi = i * CMP_BYTES, (i + 1) * CMP_BYTES
            torch.cuda._sleep(SLEEP_CYCLES)
            comm.put_signal(inbox[lo:hi], src[lo:hi], sigs[i : i + 1], operand, right, op=op)
    # The always-true comparisons enqueue nothing and never block.
    comm.signal_wait_until(sigs[0:1], "ge", 0, stream=waiter)
    comm.signal_wait_until(sigs[0:1], "le", (1 << 64) - 1, stream=waiter)
    for i, (cmp, value, _, _, _) in enumerate(CMP_CASES):
        lo, hi = i * CMP_BYTES, (i + 1) * CMP_BYTES
        comm.signal_wait_until(sigs[i : i + 1], cmp, value, stream=waiter)
        with torch.cuda.stream(waiter):
            out[lo:hi].copy_(inbox[lo:hi])
    sync(comm)
    expected = pattern(seed(21, left), k * CMP_BYTES, dev)
    for i, (cmp, value, initial, op, operand) in enumerate(CMP_CASES):
        lo, hi = i * CMP_BYTES, (i + 1) * CMP_BYTES
        assert torch.equal(out[lo:hi], expected[lo:hi]), f"wait {cmp} {value} passed too early"
        final = operand if op == "set" else (initial + operand) % (1 << 64)
        assert unsigned(int(sigs[i].item())) == final, (cmp, value, sigs[i].item())
    return f"{k} comparisons"


# ---- graph ---------------------------------------------------------------------------------
GRAPH_ROUNDS = 4
GRAPH_BYTES = 40000 + 3  # under the 64K kernel threshold of the small-kernel run
REPLAYS = 120


def scenario_graph(comm: gshmem.Comm) -> str:
    right, left = neighbours(comm)
    dev = comm.device
    total = GRAPH_ROUNDS * GRAPH_BYTES
    base = pattern(seed(31, comm.rank), total, dev)
    left_base = pattern(seed(31, left), total, dev)
    src = torch.empty_like(base)
    expect = torch.empty_like(base)
    got = torch.empty_like(base)
    inbox = comm.empty((total,), torch.uint8)
    inbox.fill_(POISON)
    sigs = comm.zeros((GRAPH_ROUNDS,), torch.int64)
    it = torch.zeros((), dtype=torch.int64, device=f"cuda:{dev}")
    put_errors = torch.zeros((), dtype=torch.int64, device=f"cuda:{dev}")
    get_errors = torch.zeros((), dtype=torch.int64, device=f"cuda:{dev}")
    for _ in range(10):  # eager stream barriers share their counters with the graph's
        comm.barrier_on_stream()
    sync(comm)

    def body() -> None:
        it.add_(1)
        step = it.to(torch.uint8)
        torch.add(base, step, out=src)  # new data every replay
        torch.add(left_base, step, out=expect)
        for k in range(GRAPH_ROUNDS):
            lo, hi = k * GRAPH_BYTES, (k + 1) * GRAPH_BYTES
            op = "add" if k % 2 else "set"
            comm.put_signal(inbox[lo:hi], src[lo:hi], sigs[k : k + 1], 1, right, op=op)
        for k in range(GRAPH_ROUNDS):
            comm.signal_wait_until(sigs[k : k + 1], "eq", 1)
        put_errors.add_((inbox != expect).sum())
        sigs.zero_()  # before the barrier: no PE signals again until every PE has reset
        comm.barrier_on_stream()
        comm.get(got, inbox, right)  # the right neighbour's inbox holds this PE's src
        get_errors.add_((got != src).sum())

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        body()
    for _ in range(REPLAYS):
        graph.replay()
    sync(comm)
    assert it.item() == REPLAYS, it.item()
    assert put_errors.item() == 0, f"{put_errors.item()} bytes differ after put_signal + wait"
    assert get_errors.item() == 0, f"{get_errors.item()} bytes differ after barrier + get"
    step = torch.tensor(REPLAYS % 256, dtype=torch.uint8, device=f"cuda:{dev}")
    assert torch.equal(inbox, left_base + step), "last replay's data differs"
    assert sigs.tolist() == [0] * GRAPH_ROUNDS
    return f"{REPLAYS} replays, kernel threshold {gshmem._C.stream_kernel_max_bytes()} B"


# ---- streams -------------------------------------------------------------------------------
STREAM_ROUNDS = 300
STREAM_SLOT = 8192


def scenario_streams(comm: gshmem.Comm) -> str:
    right, left = neighbours(comm)
    dev = comm.device
    total = STREAM_ROUNDS * STREAM_SLOT
    src_a = pattern(seed(41, comm.rank), total, dev)
    src_b = pattern(seed(42, comm.rank), total, dev)
    want_a = pattern(seed(41, left), total, dev)  # ring A goes right: data from the left
    want_b = pattern(seed(42, right), total, dev)  # ring B goes left: data from the right
    in_a = comm.empty((total,), torch.uint8)
    in_b = comm.empty((total,), torch.uint8)
    in_a.fill_(POISON)
    in_b.fill_(POISON)
    got = torch.full((total,), POISON, dtype=torch.uint8, device=f"cuda:{dev}")
    sigs = comm.zeros((2,), torch.int64)
    err_a = torch.zeros((), dtype=torch.int64, device=f"cuda:{dev}")
    err_b = torch.zeros((), dtype=torch.int64, device=f"cuda:{dev}")
    sync(comm)
    sa, sb = torch.cuda.Stream(dev), torch.cuda.Stream(dev)
    for r in range(STREAM_ROUNDS):
        lo, hi = r * STREAM_SLOT, r * STREAM_SLOT + 1 + (r * 131) % STREAM_SLOT
        comm.put_signal(in_a[lo:hi], src_a[lo:hi], sigs[0:1], r + 1, right, stream=sa)
        comm.signal_wait_until(sigs[0:1], "ge", r + 1, stream=sa)
        with torch.cuda.stream(sa):
            err_a += (in_a[lo:hi] != want_a[lo:hi]).sum()
        handle = sb.cuda_stream  # the int form of a stream
        comm.put_signal(in_b[lo:hi], src_b[lo:hi], sigs[1:2], 1, left, op="add", stream=handle)
        comm.signal_wait_until(sigs[1:2], "ge", r + 1, stream=handle)
        comm.get(got[lo:hi], in_b[lo:hi], comm.rank, stream=handle)
        with torch.cuda.stream(sb):
            err_b += (got[lo:hi] != want_b[lo:hi]).sum()
    sync(comm)
    assert err_a.item() == 0 and err_b.item() == 0, (err_a.item(), err_b.item())
    assert sigs.tolist() == [STREAM_ROUNDS, STREAM_ROUNDS], sigs.tolist()
    return f"{STREAM_ROUNDS} rounds on 2 streams"


# ---- bad arguments -------------------------------------------------------------------------
def ring_works(comm: gshmem.Comm) -> None:
    """One checked put_signal ring round (the comm is still usable)."""
    right, left = neighbours(comm)
    inbox = comm.empty((1000,), torch.uint8)
    sig = comm.zeros((1,), torch.int64)
    inbox.fill_(POISON)
    src = pattern(seed(51, comm.rank), 1000, comm.device)
    sync(comm)
    comm.put_signal(inbox, src, sig, 1, right)
    comm.signal_wait_until(sig, "eq", 1)
    sync(comm)
    assert torch.equal(inbox, pattern(seed(51, left), 1000, comm.device))
    comm.free(sig)
    comm.free(inbox)


def scenario_badargs(comm: gshmem.Comm) -> str:
    right, _ = neighbours(comm)
    dev = comm.device
    sym = comm.empty((1024,), torch.uint8)
    sig = comm.zeros((4,), torch.int64)
    local = torch.empty(1024, dtype=torch.uint8, device=f"cuda:{dev}")
    info = comm.heap_info()
    end = info["heap_base"] + info["heap_mapped"]
    checks = [
        (lambda: comm.put(local, sym, right), ["dst_sym", "not in this comm's symmetric heap"]),
        (lambda: comm.get(local, local, right), ["src_sym", "not in this comm's symmetric heap"]),
        (
            lambda: comm.put(gshmem.Buffer(comm, end - 8, 16, comm.rank), local[:16], right),
            ["8 bytes past the end"],
        ),
        (lambda: comm.put(sym, local, comm.nranks), ["out of range"]),
        (lambda: comm.get(local, sym, -1), ["out of range"]),
        (lambda: comm.put(sym[:10], local[:11], right), ["must match"]),
        (lambda: comm.put(sym.view(32, 32)[:, ::2], local[:512], right), ["contiguous"]),
        (lambda: comm.put(sym, local.cpu(), right), ["cuda:"]),
        (lambda: comm.put(sym, [1, 2], right), ["torch.Tensor or a gshmem.Buffer"]),
        (lambda: comm.signal_wait_until(sig[0:1], "gte", 1), ["cmp must be one of"]),
        (lambda: comm.signal_op(sig[0:1], 1, right, op="xor"), ["op must be 'set' or 'add'"]),
        (lambda: comm.signal_op(sig[0:1], -1, right), ["unsigned 64-bit"]),
        (lambda: comm.signal_op(sig[0:1], 1 << 64, right), ["unsigned 64-bit"]),
        (lambda: comm.signal_op(sig[0:2], 1, right), ["one int64/uint64 element"]),
        (lambda: comm.signal_op(sym[0:8], 1, right), ["one int64/uint64 element"]),
        (lambda: comm.signal_op(sig[0:1].cpu(), 1, right), ["cuda:"]),
        (
            lambda: comm.signal_op(gshmem.Buffer(comm, sig.data_ptr() + 4, 8, comm.rank), 1, 0),
            ["not 8-byte aligned"],
        ),
        (lambda: comm.signal_wait_until(sig[0:1], "gt", (1 << 64) - 1), ["never"]),
        (lambda: comm.signal_wait_until(sig[0:1], "lt", 0), ["never"]),
        (lambda: comm.quiet(stream="default"), ["stream must be"]),
        (lambda: comm.quiet(stream=-1), ["must not be negative"]),
        # The C ABI checks what Python would not let through.
        (
            lambda: gshmem._C.signal_op_on_stream(comm._handle, sig.data_ptr(), 1, 7, right, 0),
            ["not a signal operation"],
        ),
        (
            lambda: gshmem._C.signal_wait_until_on_stream(comm._handle, sig.data_ptr(), 9, 1, 0),
            ["not a comparison"],
        ),
        (
            lambda: gshmem._C.put_on_stream(comm._handle, sym.data_ptr(), 0, 8, right, 0),
            ["src is NULL"],
        ),
        (
            lambda: gshmem._C.put_signal_on_stream(
                comm._handle, sym.data_ptr(), local.data_ptr(), 8, local.data_ptr(), 1, 0, right, 0
            ),
            ["sig", "not in this comm's symmetric heap"],
        ),
    ]
    if torch.cuda.device_count() > 1:
        other = (dev + 1) % torch.cuda.device_count()
        on_other = torch.empty(16, dtype=torch.uint8, device=f"cuda:{other}")
        checks.append((lambda: comm.put(sym[:16], on_other, right), [f"cuda:{dev}"]))
        checks.append((lambda: comm.quiet(stream=torch.cuda.Stream(other)), ["belongs to"]))
    for fn, fragments in checks:
        expect_usage(fn, *fragments)
    comm.put(sym[:0], local[:0], right)  # zero bytes: nothing to do, not an error
    comm.get(local[:0], sym[:0], right)
    ring_works(comm)
    return f"{len(checks)} bad calls refused"


def scenario_nop2p(comm: gshmem.Comm) -> str:
    assert os.environ.get("GSHMEM_DISABLE_P2P") == "1"
    right, _ = neighbours(comm)
    dev = comm.device
    sym = comm.empty((4096,), torch.uint8)
    sig = comm.zeros((1,), torch.int64)
    src = pattern(seed(61, comm.rank), 4096, dev)
    for fn in (
        lambda: comm.put(sym, src, right),
        lambda: comm.get(src, sym, right),
        lambda: comm.put_signal(sym, src, sig, 1, right),
        lambda: comm.signal_op(sig, 1, right),
    ):
        expect_usage(fn, "not load/store-reachable", "GSHMEM_DISABLE_P2P", "no proxy path")
    expect_usage(comm.barrier_on_stream, "not load/store-reachable")
    # This PE itself is always reachable.
    sym.fill_(POISON)
    got = torch.full((4096,), POISON, dtype=torch.uint8, device=f"cuda:{dev}")
    comm.put_signal(sym, src, sig, 3, comm.rank)
    comm.signal_wait_until(sig, "eq", 3)
    comm.get(got, sym, comm.rank)
    torch.cuda.synchronize(dev)
    assert torch.equal(sym, src) and torch.equal(got, src)
    return "peers refused, self works"


def main() -> None:
    scenario = sys.argv[1]
    comm = gshmem.init()
    torch.cuda.set_device(comm.device)
    if os.environ.get("GSHMEM_TEST_STREAM") == "nonblocking":  # torch's pool streams are
        torch.cuda.set_stream(torch.cuda.Stream())  # non-blocking: no implicit legacy sync
    msg = globals()[f"scenario_{scenario}"](comm)
    comm.finalize()
    print(f"PASS {scenario} rank {comm.rank}/{comm.nranks}: {msg}", flush=True)


if __name__ == "__main__":
    main()
