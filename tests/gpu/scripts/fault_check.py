"""Fault injection at 2 PEs (docs/reliability.md): PE 1 stops taking part while PE 0 waits for it
in one operation. PE 0 must raise gshmem.FaultError naming PE 1 within GSHMEM_TIMEOUT + 5 s,
every later call must fail the same way, and after abort() the process must hold no socket, no
new /dev/shm file and no GPU memory of the comm.

  python fault_check.py <scenario> <how>      drives the two PEs (spawns them) and checks them

how:  kill    PE 1 is SIGKILLed once PE 0 waits: the comm's watchdog notices at once.
      silent  PE 1 stays alive and never comes: GSHMEM_TIMEOUT (5 s here) bounds PE 0's wait.
scenario (PE 0's operation):
      signal  a kernel's bounded signal_wait_until for PE 1's signal
      packets a kernel's bounded wait_packets for a message from PE 1
      barrier a kernel's device barrier_all
      all_reduce  gshmem's all_reduce kernel
      stream  an on-stream signal_wait_until (a stream memory operation; silent: the bounded
              kernel, GSHMEM_STREAM_WAIT=kernel, since a memory operation has no deadline)
      rearm   on-stream waits for a flag the stream resets and waits for again (a ring's
              pattern), all queued before the fault (silent: as stream)
      put_after  an on-stream wait, then a copy-engine put and a signal into PE 1's memory
              that run once the wait is released (silent: as stream)
      graph   a CUDA graph replay of an on-stream wait and a kernel after it (silent: as stream)
      moe     a gshmem.moe low-latency dispatch (its receive waits for every rank)
      attention  a causal bf16 gshmem.attention.ring_attention step, forward and backward,
              over the comm's PEs: PE 1 made the first call with PE 0 (the collective setup:
              the problem's agreement, the ring's symmetric channels), so PE 0's next call waits
              on its stream for K/V PE 1 never sends. The ring's waits are on-stream ones
              (stream memory operations): silent runs with GSHMEM_STREAM_WAIT=kernel, as stream;
              GSHMEM_ATTENTION_GRAPHS=0 keeps every call eager (a small problem's second call
              is otherwise captured, and the backward's capture synchronises the device behind
              the forward's blocked wait: the host, not the GPU, would wait there)
Prints "PASS <scenario> <how>" and the detection time when everything held.

`fault_check.py shared_queue` (one PE, CUDA_DEVICE_MAX_CONNECTIONS=1): comm.abort() releases an
on-stream wait although every stream of the context shares the blocked hardware queue.
"""

from __future__ import annotations

import gc
import os
import select
import signal
import subprocess
import sys
import time

TIMEOUT_S = 5.0  # GSHMEM_TIMEOUT of both PEs when PE 1 stays silent
KILL_TIMEOUT_S = 60.0  # ... when it is killed: the watchdog, not the deadline, must notice
SLACK_S = 5.0  # the bound the issue allows beyond GSHMEM_TIMEOUT
# Scenarios whose wait is an on-stream one: a stream memory operation, which only the watchdog
# releases (a dead peer); a silent peer needs the bounded kernel, whose error names no peer.
ON_STREAM = ("stream", "rearm", "put_after", "graph", "attention")
# attention: (heads, tokens per PE, head dim) of each PE's q, k and v shard (batch 1, bf16)
ATTENTION_SHAPE = (4, 256, 64)


def drive(scenario: str, how: str) -> None:
    from gshmem import _C

    uid = _C.unique_id_create("127.0.0.1", 0, False).hex()
    timeout = KILL_TIMEOUT_S if how == "kill" else TIMEOUT_S
    env = {**os.environ, "GSHMEM_TIMEOUT": str(timeout), "PYTHONUNBUFFERED": "1"}
    if scenario in ON_STREAM and how == "silent":
        env["GSHMEM_STREAM_WAIT"] = "kernel"
    if scenario == "attention":
        env["GSHMEM_ATTENTION_GRAPHS"] = "0"

    def start(rank: int) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, __file__, "pe", uid, str(rank), scenario, how],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )

    # PE 1 touches the GPU once PE 0 has measured its baseline, and is gone (reaped) before PE 0
    # measures again: GPU memory is counted device-wide, and the two may share the GPU.
    procs = [start(0), start(1)]
    try:
        read_until(procs[0], "BASELINE", 120)
        procs[1].stdin.write("GO\n")
        procs[1].stdin.flush()
        waiting = read_until(procs[0], "WAITING", 120)
        read_until(procs[1], "IDLE", 30)
        killed_at = None
        if how == "kill":
            time.sleep(1.0)  # PE 0 is inside its wait by now
            killed_at = time.time()
            procs[1].send_signal(signal.SIGKILL)
        fault = read_until(procs[0], "FAULT", timeout + SLACK_S + 30)
        procs[1].kill()
        procs[1].wait(timeout=30)
        time.sleep(1.0)  # the driver returns a dead process's GPU memory asynchronously
        out0, _ = procs[0].communicate("GO\n", timeout=60)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=30)
    print(fault + out0, end="")
    assert procs[0].returncode == 0, f"PE 0 exited {procs[0].returncode}"
    fault_at = float(fault.split()[1])
    since = killed_at if killed_at is not None else float(waiting.split()[1])
    delay = fault_at - since
    limit = SLACK_S if how == "kill" else TIMEOUT_S + SLACK_S
    assert delay <= limit, f"detected after {delay:.1f} s, more than {limit} s"
    if how == "silent":
        assert delay >= TIMEOUT_S * 0.9, f"gave up after {delay:.1f} s, before GSHMEM_TIMEOUT"
    print(f"PASS {scenario} {how}: FaultError {delay:.2f} s after the fault")


def read_until(proc: subprocess.Popen, word: str, timeout: float) -> str:
    """The first line of `proc` starting with `word` (other lines are echoed)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        # select first: a silent PE must fail this check at the deadline, not block readline
        if not select.select([proc.stdout], [], [], max(0.0, deadline - time.time()))[0]:
            break
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"the PE exited before printing {word}")
        if line.startswith(word):
            return line
        print(line, end="")
    raise AssertionError(f"no {word} within {timeout} s")


# ---- the PEs --------------------------------------------------------------------------------
def leak_baseline() -> tuple[set[str], set[str], int]:
    import torch

    fds = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds.add(os.readlink(f"/proc/self/fd/{fd}"))
        except FileNotFoundError:  # the descriptor listdir itself had open
            pass
    return fds, set(os.listdir("/dev/shm")), torch.cuda.mem_get_info()[0]


def check_nothing_left(before: tuple[set[str], set[str], int]) -> None:
    import torch

    torch.cuda.empty_cache()
    fds, shm, free = leak_baseline()
    sockets = sorted(f for f in fds - before[0] if f.startswith("socket:"))
    assert not sockets, f"sockets left open after abort: {sockets}"
    assert shm <= before[1], f"/dev/shm files left: {sorted(shm - before[1])}"
    assert free >= before[2] - (32 << 20), f"GPU memory not returned: {before[2] - free} bytes"


def pe(uid: str, rank: int, scenario: str, how: str) -> None:
    import torch

    import gshmem

    if rank == 1:
        assert sys.stdin.readline().strip() == "GO"  # PE 0 has measured its baseline
    torch.cuda.init()
    y = torch.zeros(1, device="cuda")  # the CUDA context is part of the baseline
    graph = torch.cuda.CUDAGraph()  # and so is what torch keeps once it has made a graph
    with torch.cuda.graph(graph):
        y.add_(1)
    graph.replay()
    del graph
    if scenario == "attention":
        warm_attention_kernels()
        torch.cuda.empty_cache()  # what it allocated goes back; what it loaded stays
    before = leak_baseline()
    if rank == 0:
        print("BASELINE", flush=True)
    comm = gshmem.init(bytes.fromhex(uid), rank, 2)
    op = prepare(comm, scenario)  # collective parts (buffers, graphs) while both PEs are here
    torch.cuda.synchronize()
    comm.barrier()
    if rank == 1:
        print("IDLE", flush=True)
        time.sleep(3600)  # never takes part; killed by the driver
        return
    print(f"WAITING {time.time()}", flush=True)
    op()
    torch.cuda.synchronize()  # returns: the wait gave up (deadline, abort by the watchdog)
    try:
        comm.check()
        raise AssertionError("PE 0's operation completed without PE 1")
    except gshmem.FaultError as e:
        print(f"FAULT {time.time()} {e}", flush=True)
        # An on-stream wait does not know who will signal; everything else names the peer.
        unknown = scenario in ON_STREAM and how == "silent"
        named = "signal_wait_until" if unknown else "PE 1"
        assert named in str(e), f"the error does not name {named}: {e}"
    try:
        comm.barrier()
        raise AssertionError("a failed comm accepted another call")
    except gshmem.FaultError:
        pass
    del op
    gc.collect()
    comm.abort()
    gc.collect()
    torch.cuda.synchronize()
    assert sys.stdin.readline().strip() == "GO"  # PE 1 is gone: its memory is not counted
    check_nothing_left(before)


def warm_attention_kernels() -> None:
    """Runs ring attention's local kernels once, as a 2-PE causal zigzag ring's blocks call them
    (the cuDNN forward and backward of the diagonal block and of the half blocks, the Triton
    log-sum-exp merge), before the baseline: it then holds what the libraries load, since the
    check is about the comm's memory. Compiling here also keeps the JIT out of the ring's waits,
    which GSHMEM_TIMEOUT bounds to 5 s under `silent`."""
    import torch

    from gshmem.attention.local import Dense
    from gshmem.attention.merge import merge

    kernel, (h, s, d) = Dense("cuda"), ATTENTION_SHAPE
    q, k, v, dout = torch.randn(4, 1, h, s, d, device="cuda", dtype=torch.bfloat16)
    every, front, back = slice(None), slice(0, s // 2), slice(s // 2, s)
    blocks = []  # (query rows, key rows, causal): the diagonal, then what each PE's step 1 runs
    for rows, keys, causal in ((every, every, True), (back, every, False), (every, front, False)):
        x = (q[:, :, rows], k[:, :, keys], v[:, :, keys])
        out, lse = kernel.forward(*x, causal, d**-0.5)
        kernel.backward(dout[:, :, rows], *x, out, lse, causal, d**-0.5)
        blocks.append((out, lse))
    (out, lse), (b, lse_b) = blocks[:2]
    merge(out[:, :, back], lse[:, :, back], b, lse_b, out[:, :, back], lse[:, :, back])
    torch.cuda.synchronize()


def prepare(comm, scenario: str):
    """PE 0's operation as a callable; everything collective about it done here."""
    import numpy as np
    import torch

    from gshmem.device import device_handle, packet_buffer_bytes

    sig = comm.zeros((1,), torch.int64)
    if scenario in ("signal", "packets", "barrier"):
        from device_api_check import kernel

        dev = device_handle(comm).numpy()
        out = torch.full((1,), -1, dtype=torch.int32, device="cuda")
        if scenario == "signal":
            f = kernel("bounded_signal_wait")
            f((1,), (128,), (dev, sig.data_ptr(), np.uint64(0), np.int32(1), out.data_ptr()))
            args = (dev, sig.data_ptr(), np.uint64(1), np.int32(1), out.data_ptr())
        elif scenario == "packets":
            buf = comm.zeros((packet_buffer_bytes(512),), torch.uint8)
            dst = torch.empty((512,), dtype=torch.uint8, device="cuda")
            f = kernel("bounded_packets_wait")
            # A zeroed buffer carries epoch 0: that wait completes at once.
            f((1,), (128,), (dev, buf.data_ptr(), dst.data_ptr(), np.uint64(512), np.uint32(0),
                             np.int32(1), out.data_ptr()))  # fmt: skip
            args = (dev, buf.data_ptr(), dst.data_ptr(), np.uint64(512), np.uint32(1),
                    np.int32(1), out.data_ptr())  # fmt: skip
        else:
            args, f = (dev, out.data_ptr()), kernel("bounded_barrier")
            f((1,), (128,), args)  # both PEs: the next barrier waits for PE 1
        torch.cuda.synchronize()
        assert out.item() == 1, "a bounded wait that can complete reported a fault"

        def op() -> None:
            f((1,), (128,), args)
            torch.cuda.synchronize()
            assert out.item() == 0, "the bounded wait reported success without PE 1"

        return op
    if scenario == "all_reduce":
        t = comm.zeros((1 << 16,), torch.float32)
        comm.all_reduce(t)
        return lambda: comm.all_reduce(t)
    if scenario == "rearm":
        # A ring's pattern: wait for a flag, reset it, wait again, with every wait queued
        # before the fault: the watchdog must keep releasing, not release once.
        def rearm() -> None:
            for _ in range(3):
                comm.signal_wait_until(sig, "eq", 1)
                comm.signal_op(sig, 0, comm.rank)

        return rearm
    if scenario == "put_after":
        # Behind the wait, a copy-engine put and a signal into the peer's memory, which run
        # once the wait is released: the peer is gone by then.
        dst = comm.zeros((1 << 18,), torch.float32)
        src = torch.randn(1 << 18, device="cuda")
        arrived = comm.zeros((1,), torch.int64)

        def put_after() -> None:
            comm.signal_wait_until(sig, "ge", 1)
            comm.put(dst, src, 1)
            comm.signal_op(arrived, 1, 1)

        return put_after
    if scenario == "stream":
        return lambda: comm.signal_wait_until(sig, "ge", 1)
    if scenario == "graph":
        y = torch.zeros(1, device="cuda")
        graph = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        with torch.cuda.stream(side), torch.cuda.graph(graph, stream=side):
            comm.signal_wait_until(sig, "ge", 1, stream=side)
            y.add_(1)
        return graph.replay
    if scenario == "moe":
        from gshmem.moe import Buffer

        buf = Buffer(comm, 256, 8, 4, dtype=torch.bfloat16, low_latency=True)
        x = torch.randn(8, 256, device="cuda").bfloat16()
        idx = torch.randint(0, 4, (8, 2), device="cuda")
        w = torch.rand(8, 2, device="cuda")
        return lambda: buf.low_latency_dispatch(x, idx, w)
    if scenario == "attention":
        from gshmem.attention import ring_attention, zigzag_shard

        h, s, d = ATTENTION_SHAPE
        n, me = comm.nranks, comm.rank
        g = torch.Generator(device="cuda").manual_seed(0)  # every PE shards the same sequence
        full = [torch.randn(1, h, s * n, d, generator=g, device="cuda", dtype=torch.bfloat16)
                for _ in range(4)]  # fmt: skip
        q, k, v, dout = (zigzag_shard(t, n, me) for t in full)
        for t in (q, k, v):
            t.requires_grad_()

        def step() -> None:
            # over the comm's world team, on gshmem's transport (copy-engine puts, on-stream waits)
            out = ring_attention(q, k, v, comm=comm, causal=True, backend="gshmem")
            out.backward(dout)

        # Both PEs: the first call agrees on the problem across the ring and allocates its
        # channels (collective), then runs the whole ring; PE 0's next call waits for PE 1.
        step()
        torch.cuda.synchronize()
        grads = [t.grad for t in (q, k, v)]
        assert all(gr is not None and bool(gr.isfinite().all()) for gr in grads), (
            "the setup call of ring attention gave no or non-finite gradients"
        )
        return step
    raise SystemExit(f"unknown scenario {scenario}")


def shared_queue() -> None:
    """One PE with every stream on one hardware queue (the caller sets
    CUDA_DEVICE_MAX_CONNECTIONS=1): the current stream waits on a flag nobody sets and another
    stream holds a copy ordered after it, so any work the comm queued on a stream of this
    context would sit behind the wait. comm.abort() must still release it."""
    import torch

    import gshmem

    assert os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS") == "1", "set by the caller"
    comm = gshmem.init()
    flag = comm.zeros((1,), torch.int64)
    src, side = torch.randn(1 << 20, device="cuda"), torch.cuda.Stream()
    torch.cuda.synchronize()
    comm.signal_wait_until(flag, "eq", 1)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        src.clone()
    time.sleep(0.2)
    assert not side.query(), "the copy ran before the wait was released"
    start = time.time()
    comm.abort()
    streams = (torch.cuda.current_stream(), side)
    while not all(s.query() for s in streams) and time.time() - start < 10:
        time.sleep(0.01)
    if not all(s.query() for s in streams):
        print("FAIL shared_queue: the streams still wait 10 s after abort()", flush=True)
        os._exit(1)  # a normal exit would wait for the blocked streams
    print(f"PASS shared_queue: abort() released the wait in {time.time() - start:.2f} s")


if __name__ == "__main__":
    if sys.argv[1] == "shared_queue":
        shared_queue()
    elif sys.argv[1] == "pe":
        pe(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5])
    else:
        drive(sys.argv[1], sys.argv[2])
