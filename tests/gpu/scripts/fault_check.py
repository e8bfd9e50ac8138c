"""Fault injection at 2 PEs (docs/reliability.md): PE 1 stops taking part while PE 0 waits for it
in one operation. PE 0 must raise gshmem.FaultError naming PE 1 within GSHMEM_TIMEOUT + 5 s,
every later call must fail the same way, and after abort() the process must hold no socket, no
new /dev/shm file and no GPU memory of the comm.

  python fault_check.py <scenario> <how>      drives the two PEs (spawns them) and checks them

how:  kill    PE 1 is SIGKILLed once PE 0 waits: the comm's watchdog notices at once.
      silent  PE 1 stays alive and never comes: GSHMEM_TIMEOUT (5 s here) bounds PE 0's wait.
scenario (PE 0's operation):
      signal  a kernel's bounded signal_wait_until for PE 1's signal
      barrier a kernel's device barrier_all
      all_reduce  gshmem's all_reduce kernel
      stream  an on-stream signal_wait_until (a stream memory operation; silent: the bounded
              kernel, GSHMEM_STREAM_WAIT=kernel, since a memory operation has no deadline)
      graph   a CUDA graph replay of an on-stream wait and a kernel after it (silent: as stream)
      moe     a gshmem.moe low-latency dispatch (its receive waits for every rank)
Prints "PASS <scenario> <how>" and the detection time when everything held.
"""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import time

TIMEOUT_S = 5.0  # GSHMEM_TIMEOUT of both PEs when PE 1 stays silent
KILL_TIMEOUT_S = 60.0  # ... when it is killed: the watchdog, not the deadline, must notice
SLACK_S = 5.0  # the bound the issue allows beyond GSHMEM_TIMEOUT


def drive(scenario: str, how: str) -> None:
    from gshmem import _C

    uid = _C.unique_id_create("127.0.0.1", 0, False).hex()
    timeout = KILL_TIMEOUT_S if how == "kill" else TIMEOUT_S
    env = {**os.environ, "GSHMEM_TIMEOUT": str(timeout), "PYTHONUNBUFFERED": "1"}
    if scenario in ("stream", "graph") and how == "silent":
        env["GSHMEM_STREAM_WAIT"] = "kernel"

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
        unknown = scenario in ("stream", "graph") and how == "silent"
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


def prepare(comm, scenario: str):
    """PE 0's operation as a callable; everything collective about it done here."""
    import numpy as np
    import torch

    from gshmem.device import device_handle

    sig = comm.zeros((1,), torch.int64)
    if scenario in ("signal", "barrier"):
        from device_api_check import kernel

        dev = device_handle(comm).numpy()
        out = torch.full((1,), -1, dtype=torch.int32, device="cuda")
        if scenario == "signal":
            f = kernel("bounded_signal_wait")
            f((1,), (128,), (dev, sig.data_ptr(), np.uint64(0), np.int32(1), out.data_ptr()))
            args = (dev, sig.data_ptr(), np.uint64(1), np.int32(1), out.data_ptr())
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
    raise SystemExit(f"unknown scenario {scenario}")


if __name__ == "__main__":
    if sys.argv[1] == "pe":
        pe(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5])
    else:
        drive(sys.argv[1], sys.argv[2])
