"""Placing ``gshmem.run``'s ranks on several hosts: the host list, where rank 0's bootstrap
listens, and the command line that starts one rank on its host through a remote shell.

A host list is ``HOST[:SLOTS],HOST[:SLOTS],...`` (one slot when SLOTS is left out): ranks fill
the hosts in order, so rank 0 is on the first host, where the job's bootstrap listens. A rank is
started by running ``RSH`` with the rank's shell command line as its last argument; ``{host}`` in
``RSH`` is replaced by the host (without it, the host is appended, as ``ssh HOST`` expects). The
remote command changes to the launcher's working directory, sets the rank's environment
(gshmem's variables, plus every ``GSHMEM_*``, ``UCX_*``, ``NCCL_*``, ``NVSHMEM_*``, ``TORCH_*``
and ``CUDA_*`` variable of the launcher) and runs the same Python executable, which must exist at
the same path on every host (a shared file system, or the same image).
"""

from __future__ import annotations

import os
import shlex
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "FORWARDED_PREFIXES",
    "Slot",
    "forwarded",
    "parse_hosts",
    "place",
    "remote_command",
    "rendezvous",
]

FORWARDED_PREFIXES = ("GSHMEM_", "UCX_", "NCCL_", "NVSHMEM_", "TORCH_", "CUDA_")


@dataclass(frozen=True)
class Slot:
    """Where one rank runs: its host, and its place among that host's ranks."""

    host: str
    local_rank: int
    local_size: int


def forwarded(environ: Mapping[str, str]) -> dict[str, str]:
    """The launcher's variables that travel to remote ranks (FORWARDED_PREFIXES)."""
    return {k: v for k, v in environ.items() if k.startswith(FORWARDED_PREFIXES)}


def parse_hosts(text: str) -> list[tuple[str, int]]:
    """``"a:2,b:2"`` → ``[("a", 2), ("b", 2)]``; raises ValueError naming what is wrong."""
    hosts = []
    for entry in text.split(","):
        name, sep, slots = entry.strip().partition(":")
        if not name:
            raise ValueError(f"empty host in {text!r}")
        if not sep:
            count = 1
        elif slots.isdigit() and int(slots) >= 1:
            count = int(slots)
        else:
            raise ValueError(f"{entry!r}: the slots after ':' must be a positive integer")
        hosts.append((name, count))
    names = [h for h, _ in hosts]
    if len(set(names)) != len(names):
        raise ValueError(f"a host appears twice in {text!r}: give it once with its slot count")
    return hosts


def place(hosts: Sequence[tuple[str, int]]) -> list[Slot]:
    """The slot of every rank: the first host's ranks first."""
    return [Slot(host, i, n) for host, n in hosts for i in range(n)]


def rendezvous(hosts: Sequence[tuple[str, int]], address: str | None) -> str:
    """Where rank 0's bootstrap listens: ``address``, else GSHMEM_BOOTSTRAP_ADDR, else the first
    host's IPv4 address as this machine resolves it."""
    chosen = address or os.environ.get("GSHMEM_BOOTSTRAP_ADDR")
    if chosen:
        return chosen
    first = hosts[0][0]
    try:
        return socket.gethostbyname(first)
    except OSError as e:
        raise ValueError(
            f"cannot resolve the first host {first!r} ({e}); give --bootstrap-addr, the "
            "address rank 0's host listens on"
        ) from None


def remote_command(
    rsh: str, host: str, env: Mapping[str, str], argv: Sequence[str], cwd: str
) -> list[str]:
    """The local command that runs ``argv`` on ``host`` in ``cwd`` with ``env`` (on top of the
    remote shell's own environment)."""
    words = shlex.split(rsh)
    if any("{host}" in w for w in words):
        words = [w.replace("{host}", host) for w in words]
    else:
        words.append(host)
    assignments = [f"{k}={v}" for k, v in sorted(env.items())]
    line = f"cd {shlex.quote(cwd)} && exec {shlex.join(['env', *assignments, *argv])}"
    return [*words, line]
