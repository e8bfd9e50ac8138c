"""One rank of a network-engine test (test_net_engine.py): joins the bootstrap, builds the UCX
engine on host memory and runs a scenario; prints one JSON line {"ok": ..., ...}.

    python net_worker.py <uid-hex> <rank> <nranks> <timeout> <scenario>[,<scenario>...]
    python net_worker.py env <scenario>[,...]    (under gshmem.run: its GSHMEM_* variables)

Scenarios (several run one after another on the same bootstrap; the result is the last's):
  where     where every rank runs: an allgather of (rank, local rank, local size, network
            namespace, $GSHMEM_FAKE_HOST) over the bootstrap
  rma       puts, gets and atomic adds between every pair of ranks into regions of different
            sizes per rank, checked byte for byte; an overrun and a self-put are refused
  flushes   non-blocking flushes: a round of puts into every peer, a flush started, a second
            round beside the first, a second flush; both finish while progressing, and the
            moment each does, the peers' memory (mapped here from $NET_SHARED_DIR) already
            holds what was put before it; a spent token is refused
  proxy     the same traffic through a proxy thread fed by host producer threads: put_signal
            of random sizes, signals, put_value of 1-8 bytes, counters and quiet, while regions
            are registered and deregistered; every byte and count checked
  atomics   every atomic (add, and, or, xor, swap, compare-swap; 32/64-bit integers and
            floats; fetching or not) and value gets through a proxy thread, from every rank to
            every other at once, in batches of fetches in flight; exact totals, every fetched
            value accounted for across ranks, neighbouring 32-bit halves untouched; a
            misaligned atomic stops the thread with a usage error
  die       rank 1 exits abruptly once set up; rank 0 keeps sending and must get a clear
            error (not a hang) within its timeout
  die_proxy the same through a proxy thread: the thread stops on the error, which the
            producer's next check raises
  die_idle  the same with nothing sent: rank 0 only progresses its engine, which must notice
  stall     rank 1 stays alive but stops progressing (sleeps): rank 0's flush must time out
            naming it (with UCX_TLS=tcp, where a put needs the target's progress)
  gpu       puts and gets between GPU memory regions (torch CUDA tensors, every rank on
            GPU rank % device_count), signals into host memory; needs a GPU
  gpu_producers  kernels as the proxy's producers (tests/gpu/kernels/proxy_test.cu): 256
            threads each append 4 put_signals of 4 KiB pieces of a GPU buffer for the next rank
            into a 64-slot queue in pinned host memory (so it fills and wraps), then one thread
            a quiet; every byte, signal and completion count is checked; needs a GPU and CuPy
"""

from __future__ import annotations

import faulthandler
import functools
import json
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np

from gshmem import _C, Error

REGION_BASE = 1 << 16  # rank r registers REGION_BASE + 4096 * r bytes
SIGNALS = 64
FLUSHED_SLOT = 1 << 16  # bytes each rank puts into each peer in the flushes scenario, in halves
# below the default bulk size (one-sided puts unless $NET_BULK_BYTES says otherwise)


def engine(bs, **kw):
    """The engine under test. $NET_BULK_BYTES (set by the test) moves the size from which puts
    and gets travel as rendezvous messages: 1 sends every transfer that way. $NET_BULK_PART
    splits bulk transfers into rendezvous messages of at most that many bytes. $NET_STAGING_CHUNK
    stages every buffer through two chunks per direction of that many bytes (the protocol a comm
    uses for GPU memory, on host memory). $NET_LOCAL_SHM=0 keeps UCX's peer-failure mode for
    the peers on this host (src/proxy/net_engine.h)."""
    bulk = os.environ.get("NET_BULK_BYTES")
    part = os.environ.get("NET_BULK_PART")
    chunk = os.environ.get("NET_STAGING_CHUNK")
    return _C.NetEngine(bs, bulk_bytes=int(bulk) if bulk else None,
                        part_bytes=int(part) if part else None,
                        staging_chunk=int(chunk) if chunk else None,
                        local_shm=os.environ.get("NET_LOCAL_SHM", "1") == "1", **kw)  # fmt: skip


def region_bytes(rank: int) -> int:
    return REGION_BASE + 4096 * rank


def pattern(src: int, dst: int, nbytes: int) -> np.ndarray:
    return np.random.default_rng(1000 * src + dst).integers(0, 256, nbytes, dtype=np.uint8)


def addr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def put_signal_round(eng, data: int, signals: int, sig: np.ndarray, sources: dict[int, int],
                     slot: int, rank: int) -> list[str]:  # fmt: skip
    """Puts `slot` bytes from sources[q] (an address) into slot `rank` of each peer q's region,
    then adds rank + 1 to q's signal word `rank` (odd q: the put carries the signal; even q: a
    fence, then the signal); waits, progressing this rank's engine (which applies arriving
    signals: no proxy thread here), until every peer's signal arrived. Returns what is wrong
    with the signals."""
    for q, src in sources.items():
        if q % 2:
            eng.put_signal(q, src, slot, data, slot * rank, signals, 8 * rank, rank + 1)
            continue
        eng.put(q, src, slot, data, slot * rank)
        eng.fence()
        eng.signal(q, signals, 8 * rank, rank + 1)
    eng.flush()
    eng.barrier()
    deadline = time.monotonic() + 10
    while any(int(sig[q]) != q + 1 for q in sources) and time.monotonic() < deadline:
        eng.progress()
    return [f"signal from rank {q} is {int(sig[q])}" for q in sources if int(sig[q]) != q + 1]


def check_slots(region: np.ndarray, peers: list[int], slot: int, rank: int) -> list[str]:
    """What is wrong with the slots peers filled in this rank's region (put_signal_round)."""
    wrong = [q for q in peers if not np.array_equal(region[slot * q : slot * (q + 1)],
                                                    pattern(q, rank, slot))]  # fmt: skip
    return [f"bytes from rank {q} wrong" for q in wrong]


def rma(bs, rank: int, n: int) -> dict:
    eng = engine(bs)
    mem = np.zeros(region_bytes(rank), np.uint8)
    sig = np.zeros(SIGNALS, np.uint64)
    data, signals = eng.register(addr(mem), mem.nbytes), eng.register(addr(sig), sig.nbytes)
    sizes = [eng.region_bytes(data, q) for q in range(n)]
    # Rank r writes pattern(r, q) into slot r of each peer q, then (fenced after it) adds r + 1
    # to q's signal word r; the last 4096 * q bytes of q's region only q has.
    slot = REGION_BASE // n
    sources = {q: pattern(rank, q, slot) for q in range(n) if q != rank}
    srcs = {q: addr(payload) for q, payload in sources.items()}
    errors = put_signal_round(eng, data, signals, sig, srcs, slot, rank)
    errors += check_slots(mem, list(sources), slot, rank)
    # a set overwrites what the adds left: every peer stores 1000 + its rank in word `rank`
    eng.barrier()
    for q in sources:
        eng.signal(q, signals, 8 * rank, 1000 + rank, set=True)
    eng.flush()
    eng.barrier()
    deadline = time.monotonic() + 10
    while any(int(sig[q]) != 1000 + q for q in sources) and time.monotonic() < deadline:
        eng.progress()
    errors += [f"set from rank {q} left {int(sig[q])}" for q in sources if int(sig[q]) != 1000 + q]
    # get: read back the slot this rank wrote into each peer, and the peer's private tail
    for q, payload in sources.items():
        back = np.full(slot, 0xEE, np.uint8)
        eng.get(q, addr(back), slot, data, slot * rank)
        eng.flush()
        if not np.array_equal(back, payload):
            errors.append(f"get from rank {q} wrong")
    refused = []
    peer = (rank + 1) % n
    for what, call in [
        ("overrun", lambda: eng.put(peer, addr(mem), 65, data, sizes[peer] - 64)),
        ("self", lambda: eng.put(rank, addr(mem), 8, data, 0)),
        ("misaligned signal", lambda: eng.signal(peer, signals, 4, 1)),
        ("no region", lambda: eng.put(peer, addr(mem), 8, 99, 0)),
    ]:
        try:
            call()
        except Error as e:
            refused.append(f"{what}: {type(e).__name__}: {e}")
    eng.barrier()
    eng.deregister(data)
    eng.deregister(signals)
    eng.close()
    return {"errors": errors, "refused": refused, "sizes": sizes}


def flushes(bs, rank: int, n: int) -> dict:
    eng = engine(bs)
    # Every rank's region is a file that every rank maps ($NET_SHARED_DIR): the moment a flush
    # says it finished, this rank looks at what its puts left in its peers' memory.
    folder, slot = Path(os.environ["NET_SHARED_DIR"]), FLUSHED_SLOT
    half = slot // 2
    mem = np.memmap(folder / f"region{rank}", np.uint8, "w+", shape=(n * slot,))
    data = eng.register(addr(mem), mem.nbytes)  # collective: every rank's file exists after it
    peers = [q for q in range(n) if q != rank]
    theirs = {q: np.memmap(folder / f"region{q}", np.uint8, "r", shape=(n * slot,))
              for q in peers}  # fmt: skip
    # Two rounds into each peer's slot `rank`, its first half and then its second (a flush does
    # not order what comes after it, so the rounds do not overlap), a flush started after each.
    sent = {q: pattern(rank, q, slot) for q in peers}
    tokens = []
    for start in (0, half):
        for q in peers:
            eng.put(q, addr(sent[q]) + start, half, data, slot * rank + start)
        tokens.append(eng.flush_start())

    def landed(k: int) -> list[str]:
        """What the puts before flush tokens[k] have not yet left in the peers' memory."""
        end = half * (k + 1)
        at = slot * rank
        late = [q for q in peers if not np.array_equal(theirs[q][at : at + end], sent[q][:end])]
        return [f"flush {tokens[k]} finished before its puts reached rank {q}" for q in late]

    # Rank r starts progressing r x 0.2 s late: until then nothing put into it over TCP lands
    # (its engine receives only while progressed), so an earlier rank's flush that finished
    # without its puts would be seen.
    time.sleep(0.2 * rank)
    errors: list[str] = []
    pending, deadline = list(range(len(tokens))), time.monotonic() + 30
    while pending and time.monotonic() < deadline:
        eng.progress()
        for k in [k for k in pending if eng.flushed(tokens[k])]:
            errors += landed(k)
            pending.remove(k)
    errors += [f"flush {tokens[k]} never finished" for k in pending]
    try:
        eng.flushed(tokens[0])
        spent = "accepted"
    except Error as e:
        spent = f"{type(e).__name__}: {e}"
    eng.barrier()  # every rank's flushes finished: its puts are in place
    for q in peers:
        if not np.array_equal(mem[slot * q : slot * (q + 1)], pattern(q, rank, slot)):
            errors.append(f"slot of rank {q} wrong")
    eng.barrier()
    eng.deregister(data)
    eng.close()
    return {"errors": errors, "spent": spent}


def signals_follow_data(bs, rank: int, n: int) -> dict:
    """Many signals in flight at once, each rank to the next: each covers a distinct slot put
    before it and sets its own word. Slot i by i % 4: 0, a put_signal (the signal behind a flush
    of that peer); 1, a put and then a fenced signal (behind a flush of every peer); 2, a
    put_value of the slot's first 8, 4 or 2 bytes with its signal (8 and 4: one swap message
    the target applies; 2: one inline-put message); 3, an inline put of its first 1, 100 or 1024
    bytes with its signal (one message carrying the bytes). The signals go out while the engine
    progresses, the caller not waiting. Each rank watches its words as the signals arrive and
    checks, at the moment a word is seen set, that what the slot received is already there."""
    eng = engine(bs)
    count, slot = SIGNALS, 1024  # below the default bulk size: one-sided puts, held signals
    mem = np.zeros(count * slot, np.uint8)
    sig = np.zeros(count, np.uint64)
    data, signals = eng.register(addr(mem), mem.nbytes), eng.register(addr(sig), sig.nbytes)
    eng.barrier()
    peer, left = (rank + 1) % n, (rank - 1) % n
    payload = pattern(rank, peer, count * slot)

    def first_bytes(i: int) -> int:  # what a put_value or inline slot receives
        return (8, 4, 2)[i // 4 % 3] if i % 4 == 2 else (1, 100, slot)[i // 4 % 3]

    for i in range(count):
        src = addr(payload) + i * slot
        if i % 4 == 0:
            eng.put_signal(peer, src, slot, data, i * slot, signals, 8 * i, 1, set=True)
        elif i % 4 == 1:
            eng.put(peer, src, slot, data, i * slot)
            eng.signal(peer, signals, 8 * i, 1, set=True, fenced=True)
        elif i % 4 == 2:
            nbytes = first_bytes(i)
            value = int.from_bytes(payload[i * slot : i * slot + nbytes].tobytes(), "little")
            eng.put_value(peer, value, nbytes, data, i * slot, signal_region=signals,
                          signal_offset=8 * i, signal_value=1, set=True)  # fmt: skip
        else:
            eng.put_inline(peer, src, first_bytes(i), data, i * slot, signal_region=signals,
                           signal_offset=8 * i, signal_value=1, set=True)  # fmt: skip
    want = pattern(left, rank, count * slot)
    for i in range(count):  # a put_value or inline slot receives its first bytes only
        if i % 4 >= 2:
            want[i * slot + first_bytes(i) : (i + 1) * slot] = 0
    seen: set[int] = set()
    errors: list[str] = []
    token, flushed = eng.flush_start(), False
    deadline = time.monotonic() + 30
    while (len(seen) < count or not flushed) and time.monotonic() < deadline:
        eng.progress()
        flushed = flushed or eng.flushed(token)
        for i in range(count):
            if i in seen or int(sig[i]) == 0:
                continue
            seen.add(i)
            if not np.array_equal(mem[i * slot : (i + 1) * slot], want[i * slot : (i + 1) * slot]):
                errors.append(f"signal {i} arrived before its data")
    if len(seen) < count:
        errors.append(f"{count - len(seen)} signals never arrived")
    if not flushed:
        errors.append("the flush after the put_signals never finished")
    eng.barrier()
    eng.deregister(data)
    eng.deregister(signals)
    eng.close()
    return {"errors": errors}


def put_values(rank: int) -> list[tuple[int, int, int]]:
    """(value, bytes, offset in the signal region) of the put_values rank `rank` sends each peer:
    8 bytes into word 16 + rank, then 1, 2 and 4 bytes into word 24 + rank."""
    word = 8 * (24 + rank)
    return [(0x1122334455667788 + rank, 8, 8 * (16 + rank)), (0xAB, 1, word),
            (0xCDEF, 2, word + 2), (0x01234567 + rank, 4, word + 4)]  # fmt: skip


def put_value_words(rank: int) -> list[int]:
    """Words 16 + rank and 24 + rank of a peer once rank's put_values landed (little-endian)."""
    return [0x1122334455667788 + rank, 0xAB | (0xCDEF << 16) | ((0x01234567 + rank) << 32)]


def inline_bytes(rank: int) -> np.ndarray:
    """The 13 bytes rank `rank` puts inline into words 40 + 2 * rank and 41 + 2 * rank of each
    peer's signal region, adding 5 to word 56 + rank with the same descriptor."""
    return np.arange(13, dtype=np.uint8) + 7 * rank + 1


def allowed(tid: str) -> str:
    """The CPUs thread `tid` of this process may run on, as /proc lists them."""
    with open(f"/proc/self/task/{tid}/status") as f:
        return next(line.split()[1] for line in f if line.startswith("Cpus_allowed_list"))


def stops_with(prox, fragment: str, what: str) -> list[str]:
    """The errors found when the descriptor just appended to `prox` must stop its thread with an
    error whose message holds `fragment` (`what` names the descriptor)."""
    try:
        prox.wait_retired(prox.retired() + 1, 10.0)
    except Error as e:
        return [] if fragment in str(e) else [f"{what}: {e}"]
    return [f"{what} was executed"]


def proxy(bs, rank: int, n: int) -> dict:
    eng = engine(bs)
    ops = _C.PROXY_OPS
    mem = np.zeros(region_bytes(rank), np.uint8)
    sig = np.zeros(SIGNALS, np.uint64)
    data, signals = eng.register(addr(mem), mem.nbytes), eng.register(addr(sig), sig.nbytes)
    # a small queue: producers meet a full queue and wrap; the thread pinned to one core
    core = min(os.sched_getaffinity(0))
    prox = _C.TestProxy(eng, 64, 2, cpus=[core])
    pinned = [t for t in os.listdir("/proc/self/task") if allowed(t) == str(core)]
    # the pinned one is the proxy's thread, not the one that started it
    caller_pinned = allowed(str(threading.get_native_id())) == str(core)
    per_peer = 200
    rng = np.random.default_rng(rank)
    peers = [q for q in range(n) if q != rank]
    # Rank r writes into peer q's slot r (slot = REGION_BASE // n bytes); message i of size
    # s_i carries pattern bytes; the last message to each peer is the full slot, so its content
    # is known; the signal word r counts messages.
    slot = REGION_BASE // n
    payloads = {q: pattern(rank, q, slot) for q in peers}
    carried = inline_bytes(rank)  # copied into the queue as it is pushed
    sizes = rng.integers(1, slot + 1, per_peer)
    sizes[-1] = slot

    def produce(q: int) -> None:
        for i in range(per_peer):
            while not prox.try_push(ops["put_signal"], q, data, addr(payloads[q]), slot * rank,
                                    int(sizes[i]), signals, 8 * rank, 1, counter=0):  # fmt: skip
                time.sleep(0)
        while not prox.try_push(ops["signal"], q, signal_region=signals,
                                signal_offset=8 * (SIGNALS - 1), signal_value=7):  # fmt: skip
            time.sleep(0)
        for value, nbytes, offset in put_values(rank):
            while not prox.try_push(ops["put_value"], q, signals, value, offset, nbytes):
                time.sleep(0)
        while not prox.try_push(ops["put_inline_signal"], q, signals, addr(carried),
                                8 * (40 + 2 * rank), carried.nbytes, signals, 8 * (56 + rank),
                                5):  # fmt: skip
            time.sleep(0)
        while not prox.try_push(ops["signal"], q, signal_region=signals, signal_set=True,
                                signal_offset=8 * (SIGNALS // 2 + rank),
                                signal_value=100 + rank):  # fmt: skip
            time.sleep(0)

    threads = [threading.Thread(target=produce, args=(q,)) for q in peers]
    for t in threads:
        t.start()
    # Meanwhile, collective registrations come and go while the proxy thread moves traffic
    # (the engine serialises them; its exchanges keep the worker progressing).
    extra = np.zeros(4096 * (rank + 1), np.uint8)
    for _ in range(3):
        region = eng.register(addr(extra), extra.nbytes)
        seen = [eng.region_bytes(region, q) for q in range(n)]
        eng.deregister(region)
    for t in threads:
        t.join()
    total = len(peers) * (per_peer + 3 + len(put_values(rank)))
    while not prox.try_push(ops["quiet"], 0):
        time.sleep(0)
    prox.wait_retired(total + 1, 30.0)
    eng.barrier()  # every rank's quiet retired: everything it sent has landed
    errors = []
    for q in peers:
        if not np.array_equal(mem[slot * q : slot * (q + 1)], pattern(q, rank, slot)):
            errors.append(f"bytes from rank {q} wrong")
        if int(sig[q]) != per_peer:
            errors.append(f"signal from rank {q} is {int(sig[q])}, want {per_peer}")
    for q in peers:
        got = [int(sig[16 + q]), int(sig[24 + q])]
        if got != put_value_words(q):
            errors.append(f"put_values from rank {q} read {[hex(w) for w in got]}")
        landed = sig[40 + 2 * q : 42 + 2 * q].view(np.uint8)
        if not np.array_equal(landed[:13], inline_bytes(q)) or landed[13:].any():
            errors.append(f"the inline put from rank {q} left {landed.tolist()}")
        if int(sig[56 + q]) != 5:
            errors.append(f"the inline put's signal from rank {q} reads {int(sig[56 + q])}")
    if int(sig[SIGNALS - 1]) != 7 * len(peers):
        errors.append(f"plain signals sum to {int(sig[SIGNALS - 1])}")
    errors += [f"signal set by rank {q} reads {int(sig[SIGNALS // 2 + q])}" for q in peers
               if int(sig[SIGNALS // 2 + q]) != 100 + q]  # fmt: skip
    deadline = time.monotonic() + 10
    while prox.counter(0) < len(peers) * per_peer and time.monotonic() < deadline:
        time.sleep(0.001)
    if prox.counter(0) != len(peers) * per_peer:
        errors.append(f"counter 0 is {prox.counter(0)}, want {len(peers) * per_peer}")
    eng.barrier()  # every rank checked its region before a peer's next phase writes into it
    # get through the proxy: read back the slot this rank filled in each peer (counter 1 counts
    # arrivals), with a fence and a quiet among the descriptors
    back = {q: np.full(slot, 0xEE, np.uint8) for q in peers}
    for q in peers:
        for op, kw in (("fence", {}), ("get", {"region": data, "local": addr(back[q]),
                                               "offset": slot * rank, "bytes": slot,
                                               "counter": 1})):  # fmt: skip
            while not prox.try_push(ops[op], q, **kw):
                time.sleep(0)
    while not prox.try_push(ops["quiet"], 0):
        time.sleep(0)
    prox.wait_retired(total + 1 + 2 * len(peers) + 1, 30.0)
    for q in peers:
        if not np.array_equal(back[q], payloads[q]):
            errors.append(f"get through the proxy from rank {q} wrong")
    if prox.counter(1) != len(peers):
        errors.append(f"counter 1 (gets) is {prox.counter(1)}, want {len(peers)}")
    # HEAP_REGION resolves to the region the owner names (a comm's heap, registered again when it
    # grows): the reversed payload lands in the same slots
    prox.set_heap_region(data)
    flipped = {q: np.ascontiguousarray(payloads[q][::-1]) for q in peers}
    for q in peers:
        while not prox.try_push(ops["put"], q, _C.HEAP_REGION, addr(flipped[q]), slot * rank,
                                slot):  # fmt: skip
            time.sleep(0)
    while not prox.try_push(ops["quiet"], 0):
        time.sleep(0)
    prox.wait_retired(total + 2 * len(peers) + 2 + len(peers) + 1, 30.0)
    eng.barrier()
    errors += [f"heap-region put from rank {q} wrong" for q in peers
               if not np.array_equal(mem[slot * q : slot * (q + 1)],
                                     pattern(q, rank, slot)[::-1])]  # fmt: skip
    # without a heap region such a descriptor stops the thread with a usage error
    orphan = _C.TestProxy(eng, 8, 0)
    orphan.try_push(ops["put"], peers[0], _C.HEAP_REGION, addr(mem), 0, 8)
    errors += stops_with(orphan, "not registered", "a heap-region descriptor without a heap region")
    orphan.stop()
    prox.stop()
    eng.barrier()
    eng.close()
    if seen != [4096 * (q + 1) for q in range(n)]:
        errors.append(f"a region registered during traffic has sizes {seen}")
    return {"errors": errors, "retired": prox.retired(), "pinned_threads": len(pinned),
            "caller_pinned": caller_pinned}  # fmt: skip


def push(prox, op: str, pe: int, **kw) -> int:
    """Appends one descriptor, waiting for room; its ticket."""
    while (ticket := prox.try_push_ticket(_C.PROXY_OPS[op], pe, **kw)) is None:
        time.sleep(0)
    return ticket


def fetched(prox, ticket: int, timeout: float = 30.0) -> int:
    """The value ticket `ticket` fetched, once it is there."""
    end = time.monotonic() + timeout
    while (value := prox.result(ticket)) is None:
        prox.check()
        if time.monotonic() > end:
            raise TimeoutError(f"ticket {ticket} fetched nothing in {timeout} s")
        time.sleep(0)
    return value


def f64(x: float) -> int:
    return int(np.array(x, np.float64).view(np.uint64))


def f32(x: float) -> int:
    return int(np.array(x, np.float32).view(np.uint32))


def atomics(bs, rank: int, n: int) -> dict:
    eng = engine(bs)
    amo, kind = _C.PROXY_AMO_OPS, _C.PROXY_AMO_TYPES
    cells = np.zeros(16, np.uint64)
    halves = cells.view(np.uint32)  # halves[2 * w] is the low half of word w
    halves[4], halves[5] = 0xFFFFFFFF, 0x12345678  # word 2: a u32 that wraps, its neighbour
    cells[7] = ~np.uint64(0)
    cells[10] = 0x0807060504030201
    region = eng.register(addr(cells), cells.nbytes)
    prox = _C.TestProxy(eng, 64, 0)
    eng.barrier()
    peers = [q for q in range(n) if q != rank]
    k, batch = 96, 32  # a batch of fetches in flight stays below the queue's 64 result slots
    mine = {q: [] for q in peers}  # old values this rank's fetch_adds saw at each peer

    def atomic(q: int, op: str, word: int, operand: int, t: str = "u64", **kw) -> int:
        return push(prox, "atomic", q, region=region, offset=8 * word, local=operand,
                    amo=amo[op], amo_type=kind[t], **kw)  # fmt: skip

    old_swaps = np.zeros(n, np.uint64)  # what this rank's swap found at each peer
    for q in peers:
        for _ in range(0, k, batch):
            tickets = [atomic(q, "add", 0, 1, fetch=True) for _ in range(batch)]
            mine[q] += [fetched(prox, t) for t in tickets]
        for _ in range(k):
            atomic(q, "add", 1, rank + 1)
            atomic(q, "add", 4, f32(0.25), "f32")
        atomic(q, "add", 2, 1, "u32")
        doubles = [atomic(q, "add", 3, f64(0.5), "f64", fetch=True) for _ in range(batch)]
        doubles = [float(np.array(fetched(prox, t), np.uint64).view(np.float64))
                   for t in doubles]  # fmt: skip
        atomic(q, "or", 5, 1 << rank, fetch=True)
        for value in ((rank + 1) << 8, (rank + 1) << 8, rank):
            atomic(q, "xor", 6, value, "u32")
        atomic(q, "and", 7, ~(1 << rank) & 0xFFFFFFFFFFFFFFFF)
        old_swaps[q] = fetched(prox, atomic(q, "swap", 8, 100 + rank, fetch=True))
        for _ in range(8):  # increments by compare-and-swap, racing every other rank
            seen = fetched(prox, push(prox, "get_value", q, region=region, offset=72, bytes=8))
            while (old := fetched(prox, atomic(q, "compare_swap", 9, seen + 1, fetch=True,
                                               compare=seen))) != seen:  # fmt: skip
                seen = old
        values = [fetched(prox, push(prox, "get_value", q, region=region, offset=80, bytes=b))
                  for b in (1, 2, 4, 8)]  # fmt: skip
    push(prox, "quiet", 0)
    prox.wait_retired(prox.retired() + 1, 30.0)
    eng.barrier()  # every rank's atomics applied (each answered before its quiet retired)
    errors = []
    others = [q for q in range(n) if q != rank]
    want = {
        0: k * (n - 1),
        1: k * sum(q + 1 for q in others),
        5: sum(1 << q for q in others),
        6: functools.reduce(lambda a, b: a ^ b, others, 0),
        7: ~np.uint64(sum(1 << q for q in others)),
        9: 8 * (n - 1),
    }
    errors += [f"word {w} is {int(cells[w]):#x}, want {int(v):#x}" for w, v in want.items()
               if int(cells[w]) != int(v)]  # fmt: skip
    if (int(halves[4]), int(halves[5])) != ((0xFFFFFFFF + n - 1) & 0xFFFFFFFF, 0x12345678):
        errors.append(f"u32 add: halves {int(halves[4]):#x} {int(halves[5]):#x}")
    if float(cells[3:4].view(np.float64)[0]) != 0.5 * batch * (n - 1):
        errors.append(f"f64 add: {float(cells[3:4].view(np.float64)[0])}")
    if float(halves[8:9].view(np.float32)[0]) != 0.25 * k * (n - 1) or halves[9] != 0:
        errors.append(f"f32 add: {float(halves[8:9].view(np.float32)[0])}, {int(halves[9])}")
    if sorted(doubles) != doubles or any(d % 0.5 for d in doubles):
        errors.append(f"f64 fetch_add saw {doubles[:4]}...")
    if values != [0x01, 0x0201, 0x04030201, 0x0807060504030201]:
        errors.append(f"value gets read {[hex(v) for v in values]}")
    # every fetch_add's old value at each target, over all ranks: 0 .. k (n - 1) - 1 once each
    table = np.zeros((n, k), np.uint64)
    for q in peers:
        table[q] = mine[q]
    everyone = np.frombuffer(bs.allgather(table.tobytes()), np.uint64).reshape(n, n, k)
    seen_here = np.sort(np.concatenate([everyone[q, rank] for q in others]))
    if not np.array_equal(seen_here, np.arange(k * (n - 1))):
        errors.append("fetch_add old values are not 0 .. k (n - 1) - 1 once each")
    # the swaps at this rank: the old values they found and the last value are 0 and every
    # value swapped in, once each
    swaps = np.frombuffer(bs.allgather(old_swaps.tobytes()), np.uint64).reshape(n, n)
    found = sorted([int(swaps[q, rank]) for q in others] + [int(cells[8])])
    if found != sorted([0] + [100 + q for q in others]):
        errors.append(f"swaps found {found}")
    eng.barrier()
    # a misaligned atomic is refused: the thread stops with a usage error naming it
    push(prox, "atomic", peers[0], region=region, offset=4, amo=amo["add"], amo_type=kind["u64"])
    errors += stops_with(prox, "aligned", "a misaligned atomic")
    prox.stop()
    eng.barrier()
    eng.close()
    return {"errors": errors, "retired": prox.retired()}


def fault(bs, rank: int, n: int, how: str, through: str) -> dict:
    """Rank 1 exits abruptly (`how` = "exit") or stops taking part while alive ("stall"); rank 0
    keeps sending, on the engine directly or through a proxy thread (`through`), or only
    progresses with nothing in flight ("idle"), and reports the error it got and when."""
    eng = engine(bs, timeout=5.0)
    mem = np.zeros(1 << 20, np.uint8)
    data = eng.register(addr(mem), mem.nbytes)
    prox = _C.TestProxy(eng, 64, 1) if through == "proxy" and rank == 0 else None
    eng.barrier()
    if rank == 1:
        if how == "exit":
            os._exit(0)  # no goodbye: sockets close as the process goes
        time.sleep(60)  # alive, never progressing: the test kills it
    ops = _C.PROXY_OPS
    start = time.monotonic()
    try:
        for i in range(100_000):
            if through == "idle":  # nothing sent: the engine must notice by itself
                eng.progress()
                time.sleep(0.001)
                continue
            if prox is None:
                eng.put(1, addr(mem), mem.nbytes, data, 0)
                eng.flush()
                continue
            while not prox.try_push(ops["put"], 1, data, addr(mem), 0, mem.nbytes):
                prox.check()
            while not prox.try_push(ops["quiet"], 1):
                prox.check()
            prox.wait_retired(2 * (i + 1), 30.0)
    except Error as e:
        return {"error": type(e).__name__, "message": str(e), "after": time.monotonic() - start}
    finally:
        # The proxy thread, then the engine (which unmaps `mem`), before `mem` itself goes.
        del prox
        eng.close()
    return {"error": None, "after": time.monotonic() - start}


def die(bs, rank: int, n: int) -> dict:
    return fault(bs, rank, n, "exit", "engine")


def die_proxy(bs, rank: int, n: int) -> dict:
    return fault(bs, rank, n, "exit", "proxy")


def die_idle(bs, rank: int, n: int) -> dict:
    return fault(bs, rank, n, "exit", "idle")


def stall(bs, rank: int, n: int) -> dict:
    return fault(bs, rank, n, "stall", "engine")


def gpu(bs, rank: int, n: int) -> dict:
    import torch

    torch.cuda.set_device(rank % torch.cuda.device_count())
    eng = engine(bs)
    slot = 1 << 20
    mem = torch.full((slot * n,), 0xEE, dtype=torch.uint8, device="cuda")
    sig = np.zeros(SIGNALS, np.uint64)
    data = eng.register(mem.data_ptr(), mem.numel())
    signals = eng.register(addr(sig), sig.nbytes)
    sources = {q: torch.from_numpy(pattern(rank, q, slot)).cuda() for q in range(n) if q != rank}
    torch.cuda.synchronize()
    srcs = {q: payload.data_ptr() for q, payload in sources.items()}
    errors = put_signal_round(eng, data, signals, sig, srcs, slot, rank)
    errors += check_slots(mem.cpu().numpy(), list(sources), slot, rank)
    for q, payload in sources.items():
        back = torch.full((slot,), 0x11, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()  # the fill runs on torch's stream: done before the get lands
        eng.get(q, back.data_ptr(), slot, data, slot * rank)
        eng.flush()
        if not torch.equal(back, payload):
            errors.append(f"get from rank {q} wrong")
    eng.barrier()
    eng.deregister(data)
    eng.deregister(signals)
    eng.close()
    return {"errors": errors}


def gpu_producers(bs, rank: int, n: int) -> dict:
    import cupy as cp

    import gshmem

    cp.cuda.Device(rank % cp.cuda.runtime.getDeviceCount()).use()
    kernels = Path(__file__).resolve().parents[1] / "gpu" / "kernels" / "proxy_test.cu"
    module = cp.RawModule(code=kernels.read_text(),
                          options=(f"-I{gshmem.include_dir()}", "-std=c++17"))  # fmt: skip
    push = module.get_function("proxy_push")
    eng = engine(bs)
    ops = _C.PROXY_OPS
    blocks, threads, per_thread, chunk = 8, 32, 4, 4096
    pieces = blocks * threads * per_thread
    mem = cp.full(pieces * chunk, 0xEE, dtype=cp.uint8)
    sig = np.zeros(SIGNALS, np.uint64)
    data = eng.register(mem.data.ptr, mem.nbytes)
    signals = eng.register(addr(sig), sig.nbytes)
    src = cp.asarray(pattern(rank, (rank + 1) % n, pieces * chunk))
    full_waits = cp.zeros(1, dtype=cp.uint64)
    prox = _C.TestProxy(eng, 64, 1, gpu=True)
    slots, tail, head, capacity = prox.queue()
    peer = (rank + 1) % n

    def launch(grid: int, block: int, op: str, each: int) -> None:
        args = (np.uint64(slots), np.uint64(tail), np.uint64(head), np.uint64(capacity),
                np.int32(ops[op]), np.int32(peer), np.int32(data), src,
                np.uint64(chunk), np.int32(signals), np.uint64(8 * rank), np.uint64(each),
                full_waits)  # fmt: skip
        push((grid,), (block,), args)

    cp.cuda.Device().synchronize()
    launch(blocks, threads, "put_signal", per_thread)
    launch(1, 1, "quiet", 1)
    cp.cuda.Device().synchronize()
    prox.wait_retired(pieces + 1, 60.0)
    eng.barrier()  # every rank's quiet retired: everything it sent has landed
    left = (rank - 1) % n
    deadline = time.monotonic() + 10
    while int(sig[left]) != pieces and time.monotonic() < deadline:
        time.sleep(0.001)  # this rank's proxy thread applies the signals as they arrive
    errors = []
    if not np.array_equal(cp.asnumpy(mem), pattern(left, rank, pieces * chunk)):
        errors.append(f"bytes from rank {left} wrong")
    if int(sig[left]) != pieces:
        errors.append(f"signal from rank {left} is {int(sig[left])}, want {pieces}")
    if prox.counter(0) != pieces:
        errors.append(f"counter 0 is {prox.counter(0)}, want {pieces}")
    prox.stop()
    eng.barrier()
    eng.close()
    return {"errors": errors, "full_waits": int(full_waits[0]), "retired": prox.retired()}


def where(bs, rank: int, n: int) -> dict:
    mine = {
        "rank": rank,
        "local_rank": int(os.environ.get("GSHMEM_LOCAL_RANK", "-1")),
        "local_size": int(os.environ.get("GSHMEM_LOCAL_WORLD_SIZE", "-1")),
        "netns": os.stat("/proc/self/ns/net").st_ino,
        "host": os.environ.get("GSHMEM_FAKE_HOST"),
    }
    blob = json.dumps(mine).encode().ljust(256)
    everyone = bs.allgather(blob)
    return {"ranks": [json.loads(everyone[i : i + 256]) for i in range(0, 256 * n, 256)]}


SCENARIOS = {
    "where": where,
    "rma": rma,
    "flushes": flushes,
    "signals_follow_data": signals_follow_data,
    "proxy": proxy,
    "atomics": atomics,
    "die": die,
    "die_proxy": die_proxy,
    "die_idle": die_idle,
    "stall": stall,
    "gpu": gpu,
    "gpu_producers": gpu_producers,
}


def main() -> None:
    faulthandler.enable()  # a native crash still says where
    if sys.argv[1] == "env":
        names = ("GSHMEM_UNIQUE_ID", "GSHMEM_RANK", "GSHMEM_WORLD_SIZE")
        timeout = os.environ.get("GSHMEM_TIMEOUT", "20")
        args = [*(os.environ[k] for k in names), timeout, sys.argv[2]]
    else:
        args = sys.argv[1:6]
    uid, rank, n, timeout = bytes.fromhex(args[0]), int(args[1]), int(args[2]), float(args[3])
    try:
        bs = _C.BootstrapHandle(uid, rank, n, timeout)
        for scenario in args[4].split(","):
            result = SCENARIOS[scenario](bs, rank, n)
        print(json.dumps({"ok": True, "result": result}), flush=True)
    except Error as e:
        print(json.dumps({"ok": False, "error": type(e).__name__, "message": str(e)}), flush=True)


if __name__ == "__main__":
    main()
