"""``python -m gshmem.demo [attention|p2p]``: see the package's docstring."""

from __future__ import annotations

import os
import sys

import gshmem

DEMOS = ("attention", "p2p")


def launched() -> bool:
    return any(v in os.environ for v in ("GSHMEM_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"))


def main(argv: list[str]) -> int:
    which = argv[0] if argv else "attention"
    if which not in DEMOS:
        print(f"usage: python -m gshmem.demo [{'|'.join(DEMOS)}]", file=sys.stderr)
        return 2
    gpus = gshmem.device_count()
    if gpus == 0:
        print(
            "gshmem demo: no CUDA GPU is visible on this machine, and the demo needs at least one "
            "(it starts one process per GPU). Nothing was run. Run it on a GPU host; the tests "
            "(README) run here.",
            file=sys.stderr,
        )
        return 1
    if launched():
        if which == "p2p":
            from gshmem.demo.p2p import worker
        else:
            from gshmem.demo.attention import worker
        return worker()
    from gshmem import run

    return run.main(["-n", str(gpus), "--timeout", "300", "-m", "gshmem.demo", which])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
