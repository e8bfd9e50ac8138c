"""GPU checks of windows (docs/windows.md), run as one rank of `python -m gshmem.run -n N`.

Usage: window_check.py SCENARIO...
  load     a window over a torch tensor whose size differs per PE (CUDA IPC), 4 contexts of 2
           signals and 2 counters: every block of every PE puts chunks to every PE with
           SignalAdd and CounterInc while the receivers wait on their signals and compare every
           word; each PE's last chunk-sized tail written by all; exact signal and counter totals
           read from the host; put_value to the right neighbour; reset; a second window over the
           same torch segment that outlives the first (the shared IPC mapping)
  heap     the same exchange over a window of symmetric-heap memory, lengths differing per PE
  errors   bad arguments raise UsageError on every PE (counts that differ between PEs, a CPU
           tensor, a wrong context count) and the comm works afterwards
Prints "PASS <scenario>" on success; any failure raises (non-zero exit).
"""

from __future__ import annotations

from pathlib import Path

import cupy as cp
import numpy as np
import torch
from device_api_check import raw_module, run_scenarios, sync

import gshmem

KERNELS = Path(__file__).resolve().parents[1] / "kernels" / "window_test.cu"
BLOCKS, THREADS, ROUNDS, CHUNK = 12, 256, 3, 4096
CONTEXTS, SIGNALS, COUNTERS = 4, 2, 2


def launch(name: str, grid: int, args: tuple) -> None:
    raw_module(KERNELS).get_function(name)((grid,), (THREADS,), args)


def per_context(c: int) -> int:
    return len(range(c, BLOCKS, CONTEXTS))


def run_exchange(comm: gshmem.Comm, dev, win: gshmem.window.Window) -> None:
    """exchange + verify, then the exact totals from the host."""
    n = comm.nranks
    src = cp.zeros(n * BLOCKS * (ROUNDS + 1) * CHUNK // 4, dtype=cp.uint32)  # one per put
    out = cp.zeros(2, dtype=cp.uint64)
    launch("exchange", BLOCKS,
           (dev, win.numpy(), src, np.int32(ROUNDS), np.uint64(CHUNK), out[1:]))  # fmt: skip
    args = (dev, win.numpy(), np.int32(ROUNDS), np.uint64(CHUNK), np.int32(BLOCKS), out)
    launch("verify", CONTEXTS, args)
    sync(comm)
    mismatched, gave_up = (int(x) for x in out.get())
    assert gave_up == 0, f"PE {comm.rank}: {gave_up} puts, flushes or signal waits gave up"
    assert mismatched == 0, f"PE {comm.rank}: {mismatched} words differ from what was put"
    signals, counters = win.signals.cpu().tolist(), win.counters.cpu().tolist()
    for c in range(CONTEXTS):
        puts = n * per_context(c) * ROUNDS
        assert signals[c][0] == puts, (c, signals)
        assert signals[c][1] == (5 * n if c == 0 else 0), (c, signals)
        assert counters[c] == [puts, 0], (c, counters)
    sync(comm)  # every PE has read its totals before anyone's put_value (run_values) lands


def run_values(comm: gshmem.Comm, dev, win: gshmem.window.Window) -> None:
    out = cp.zeros(2, dtype=cp.uint64)
    launch("values", 1, (dev, win.numpy(), np.uint64(0), out))
    sync(comm)
    assert [int(x) for x in out.get()] == [0, 0], f"PE {comm.rank}: put_value {out.get()}"
    assert win.signals.cpu().tolist()[1][1] == THREADS, win.signals


def run_reset(comm: gshmem.Comm, dev, win: gshmem.window.Window) -> None:
    launch("reset", 1, (dev, win.numpy()))
    sync(comm)
    assert not win.signals.any() and not win.counters.any(), (win.signals, win.counters)


def window_bytes(comm: gshmem.Comm) -> int:
    """Room for every sender's slots plus a tail, larger on higher PEs (sizes differ)."""
    return (comm.nranks * BLOCKS * ROUNDS + 1) * CHUNK + comm.rank * 3 * CHUNK


def scenario_load(comm: gshmem.Comm, dev) -> None:
    torch.manual_seed(comm.rank)
    data = torch.randint(0, 255, (window_bytes(comm),), dtype=torch.uint8, device="cuda")
    later = torch.zeros(window_bytes(comm), dtype=torch.uint8, device="cuda")  # same segment
    win = comm.register_window(data, contexts=CONTEXTS, signals=SIGNALS, counters=COUNTERS)
    assert win.sizes == [(comm.nranks * BLOCKS * ROUNDS + 1) * CHUNK + r * 3 * CHUNK
                         for r in range(comm.nranks)], win.sizes  # fmt: skip
    run_exchange(comm, dev, win)
    run_values(comm, dev, win)
    run_reset(comm, dev, win)
    second = comm.register_window(later, contexts=CONTEXTS, signals=SIGNALS, counters=COUNTERS)
    win.deregister()  # the second window's mapping of the peers' segment must survive this
    run_exchange(comm, dev, second)
    second.deregister()


def scenario_heap(comm: gshmem.Comm, dev) -> None:
    full = (comm.nranks * BLOCKS * ROUNDS + 1) * CHUNK + comm.nranks * 3 * CHUNK
    buf = comm.calloc(full)
    part = buf.view(0, window_bytes(comm))
    win = comm.register_window(part, contexts=CONTEXTS, signals=SIGNALS, counters=COUNTERS)
    run_exchange(comm, dev, win)
    win.deregister()
    comm.free(buf)


def scenario_errors(comm: gshmem.Comm, dev) -> None:
    data = torch.zeros(1 << 16, dtype=torch.uint8, device="cuda")
    cases = [
        (lambda: comm.register_window(data, signals=1 + comm.rank), "every PE must ask"),
        (lambda: comm.register_window(torch.zeros(8)), "is on cpu"),
        (lambda: comm.register_window(data, contexts=0), "contexts must be"),
    ]
    for call, words in cases:
        try:
            call()
        except gshmem.UsageError as e:
            assert words in str(e), (words, str(e))
        else:
            raise AssertionError(f"no UsageError for {words!r}")
    comm.barrier()  # the comm is still usable, on every PE
    win = comm.register_window(data)
    win.deregister()


def main() -> None:
    run_scenarios(globals(), lambda: raw_module(KERNELS).compile())


if __name__ == "__main__":
    main()
