"""``python -m gshmem.bench SUITE [options]``: the command line of the benchmark suites.

Outside a launched job it checks that this host has the GPUs, then re-launches itself as
``python -m gshmem.run -n NP --timeout T --no-tag-output -m gshmem.bench SUITE ...`` (the launcher
kills every rank after T seconds: exit 124) and returns its exit code. Inside a job every rank
runs the suite (collective). Exit codes: 0 done; 1 a measurement failed; 2 bad usage; 3 no GPU,
torch or CuPy here; 124 timed out.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence

# (Kept here, not only in gshmem.bench, so the command works even where an editable install
# predates the package and loads it as a namespace package.)
SUITES = ("p2p", "coll", "attention", "jax", "train", "moe")
USAGE = (
    "usage: python -m gshmem.bench SUITE [options]\n"
    f"suites: {', '.join(SUITES)}   (python -m gshmem.bench SUITE --help for its options)"
)
_JOB_VARS = ("GSHMEM_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK")


def _say(text: str) -> None:
    sys.stderr.write(f"gshmem.bench: {text}\n")
    sys.stderr.flush()


def inside_job(env: dict[str, str] | None = None) -> bool:
    """Whether this process is one rank of a launched job (gshmem.run, torchrun, MPI)."""
    e = os.environ if env is None else env
    if any(v in e for v in _JOB_VARS):
        return True
    return "RANK" in e and "WORLD_SIZE" in e


def relaunch_command(suite: str, args: Sequence[str], nprocs: int, timeout: float) -> list[str]:
    """The launcher command line that runs this suite as ``nprocs`` ranks."""
    return [
        sys.executable, "-m", "gshmem.run", "-n", str(nprocs), "--timeout", f"{timeout:g}",
        "--no-tag-output", "-m", "gshmem.bench", suite, *args,
    ]  # fmt: skip


def gpu_count() -> int:
    try:
        import gshmem

        return gshmem.device_count()
    except Exception:  # noqa: BLE001 - no native library or driver: no GPU to use
        return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if args else 2
    suite, rest = args[0], args[1:]
    if suite not in SUITES:
        _say(f"unknown suite {suite!r}\n{USAGE}")
        return 2
    from gshmem.bench import attention, coll, jax_suite, moe, options, p2p, train

    parse = {
        "coll": coll.parse_args,
        "attention": attention.parse_args,
        "jax": jax_suite.parse_args,
        "train": train.parse_args,
        "moe": moe.parse_args,
    }
    run = {"coll": coll.run, "attention": attention.run, "jax": jax_suite.run, "train": train.run,
           "moe": moe.run}  # fmt: skip
    # exits 2 with a message on bad options, 0 on --help
    opts = parse.get(suite, options.parse_args)(rest)
    # jax's one-process layout drives every GPU from here: no relaunch
    if inside_job() or getattr(opts, "layout", None) == "one":
        return run.get(suite, p2p.run)(opts)
    have = gpu_count()
    if have < opts.nprocs:
        _say(
            f"needs {opts.nprocs} CUDA GPUs on this host (one per PE), found {have}; run it on "
            "a GPU host (see docs/benchmarks.md)"
        )
        return 3
    env = dict(os.environ)
    for k, v in (
        ("NCCL_NVLS_ENABLE", "0"),
        ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
        ("NVSHMEM_DISABLE_NVLS", "1"),
    ):
        env.setdefault(k, v)
    if getattr(opts, "path", "direct") == "proxy":
        env.update(options.PROXY_ENV)
    cmd = relaunch_command(suite, rest, opts.nprocs, opts.timeout)
    try:
        code = subprocess.call(cmd, env=env)
    except KeyboardInterrupt:
        return 130
    if code == 124:
        _say(f"timed out after {opts.timeout:g} s (--timeout); the launcher stopped every rank")
    return code


if __name__ == "__main__":
    sys.exit(main())
