"""Child side of the multi-process launch tests (run as a script, one process per rank).

    python _helpers_launch.py MODE [RANK NRANKS PORT]

MODE sets up what the job "already has" (``plain``: nothing, the environment says it all;
``torch``: a gloo process group over tcp://127.0.0.1:PORT; ``jax``: jax.distributed with its
coordinator at 127.0.0.1:PORT), then calls ``detect()`` twice (the second time with a key),
proves each id by a bootstrap allgather among the ranks, and prints one line
``RESULT <json>`` with what each call returned and what the allgather gathered (or writes it to
``$LAUNCH_TEST_RESULT_DIR/rank<r>.out`` when that is set).
"""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gshmem.launch import Launch

SKIP_EXIT = 77  # the parent test skips when a rank exits with this


def _setup(mode: str, argv: list[str]) -> None:
    if mode == "torch":
        import torch.distributed as dist

        rank, nranks, port = (int(a) for a in argv)
        dist.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=nranks
        )
    elif mode == "jax":
        import jax

        rank, nranks, port = (int(a) for a in argv)
        try:
            jax.distributed.initialize(
                coordinator_address=f"127.0.0.1:{port}",
                num_processes=nranks,
                process_id=rank,
                initialization_timeout=20,
            )
        except Exception as e:  # the test skips, quoting this line
            print(f"jax.distributed.initialize does not work here: {e!r}"[:300], file=sys.stderr)
            sys.exit(SKIP_EXIT)


def _teardown(mode: str) -> None:
    if mode == "torch":
        import torch.distributed as dist

        dist.destroy_process_group()
    elif mode == "jax":
        import jax

        jax.distributed.shutdown()


def _prove(launch: Launch) -> list[dict[str, object]]:
    """Collective: every rank connects with the detected id and allgathers what it detected."""
    from gshmem import _C

    mine = {
        "uid": launch.uid.hex(),
        "rank": launch.rank,
        "nranks": launch.nranks,
        "local_rank": launch.local_rank,
        "local_size": launch.local_size,
        "method": launch.method,
        "rendezvous": launch.rendezvous,
    }
    blob = json.dumps(mine).encode().ljust(512)
    bs = _C.BootstrapHandle(launch.uid, launch.rank, launch.nranks, 10.0)
    try:
        out = bs.allgather(blob)
    finally:
        bs.close()
    return [json.loads(out[i * 512 : (i + 1) * 512]) for i in range(launch.nranks)]


def main(argv: list[str]) -> int:
    mode = argv[0]
    _setup(mode, argv[1:])
    from gshmem.launch import detect

    first = detect()
    gathered_first = _prove(first)
    second = detect(key="second")
    gathered_second = _prove(second)
    result = {"me": first.rank, "first": gathered_first, "second": gathered_second}
    out_dir = os.environ.get("LAUNCH_TEST_RESULT_DIR")
    if out_dir:  # launchers that interleave the ranks' output (torchrun, mpirun)
        with open(os.path.join(out_dir, f"rank{first.rank}.out"), "w") as f:
            f.write("RESULT " + json.dumps(result) + "\n")
    else:
        print("RESULT " + json.dumps(result), flush=True)
    _teardown(mode)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
