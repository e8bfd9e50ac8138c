"""One rank of a CPU bootstrap test: runs a scenario and prints one JSON line with the outcome.

Usage: python bootstrap_worker.py UID_HEX RANK NRANKS TIMEOUT SCENARIO
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
import time

from gshmem import _C, Error


def big_payload(rank: int) -> bytes:
    """Rank ``rank``'s 100 000 bytes for the large allgather: its own, not one byte repeated."""
    return random.Random(rank).randbytes(100000)


def run(uid: bytes, rank: int, nranks: int, timeout: float, scenario: str) -> object:
    bs = _C.BootstrapHandle(uid, rank, nranks, timeout)
    if scenario == "connect-only":
        return None
    if scenario == "exit-after-connect":
        os._exit(0)  # vanish without closing anything politely
    if scenario == "stall":  # connected, then never calls anything (the test kills it)
        print(json.dumps({"connected": True}), flush=True)
        time.sleep(600)
    if scenario == "mismatch" and rank == 1:
        bs.barrier()
        return None
    if scenario in ("collectives", "mismatch", "survivor"):
        out = {}
        out["allgather"] = list(bs.allgather(bytes([rank, 255 - rank, 7])))
        root = nranks - 1
        out["broadcast"] = bs.broadcast(f"from {rank}".encode() * 3, root).decode()
        bs.barrier()
        big = bs.allgather(big_payload(rank))  # larger than socket buffers
        out["big"] = [len(big), hashlib.sha256(big).hexdigest()]
        if scenario == "collectives":
            bs.connect_local(list(range(nranks)))
            fd = os.memfd_create(f"rank{rank}")
            os.write(fd, f"memory of rank {rank}".encode())
            got = bs.exchange_fd(fd, 1234)
            out["fds"] = [os.pread(f, 64, 0).decode() if f >= 0 else None for f in got]
            for f in got:
                if f >= 0:
                    os.close(f)
            os.close(fd)
        bs.close()
        return out
    if scenario == "watch":  # the watchdog's view of the connections, polled as it does
        bs.barrier()
        print(json.dumps({"connected": True}), flush=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            pe, notice = bs.closed_peer()
            if pe >= 0:
                break
            time.sleep(0.05)
        else:
            return {"closed": -1}
        out = {"closed": pe, "notice": notice}
        if rank == 0:
            bs.announce_failure(f"PE {pe} is gone (announced by rank 0)")
        try:
            bs.barrier()  # the next collective fails with the announcement
            out["next"] = "ok"
        except Error as e:
            out["next"] = f"{type(e).__name__}: {e}"
        return out
    raise ValueError(scenario)


def main() -> None:
    uid_hex, rank, nranks, timeout, scenario = sys.argv[1:6]
    try:
        result = run(bytes.fromhex(uid_hex), int(rank), int(nranks), float(timeout), scenario)
        print(json.dumps({"ok": True, "result": result}), flush=True)
    except Error as e:
        print(json.dumps({"ok": False, "error": type(e).__name__, "msg": str(e)}), flush=True)


if __name__ == "__main__":
    main()
