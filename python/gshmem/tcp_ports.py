"""TCP ports for listeners that a job binds later (torch.distributed's store, JAX's coordinator),
chosen where no other socket on the host takes them in the meantime. Rank 0's bootstrap port is
drawn the same way by the native side (gshmem_unique_id_create with port 0 and listen 0), and
read back from an id by ``rendezvous_port``."""

from __future__ import annotations

import random
import socket
from collections.abc import Sequence

EPHEMERAL_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"
LOWEST_DRAWN_PORT = 15000  # kLowestDrawnPort in src/bootstrap/unique_id.cpp


def ephemeral_ports(path: str = EPHEMERAL_RANGE) -> tuple[int, int] | None:
    """The range the kernel hands out for bind(0) and outgoing connections, or None if unknown."""
    try:
        with open(path) as f:
            lo, hi = (int(x) for x in f.read().split())
    except (OSError, ValueError):
        return None
    return lo, hi


def free_port(avoid: Sequence[int] = (), path: str = EPHEMERAL_RANGE) -> int:
    """A TCP port free on this host now, for a listener that binds it later.

    Drawn at random below the kernel's ephemeral range where there is room: a port that bind(0)
    returned goes back to the ephemeral pool, where any outgoing connection or other bind(0) on
    the host may take it before its listener binds it (seen in parallel test runs as a store's
    EADDRINUSE); below that range only explicit choices land. ``avoid``: ports already chosen
    for this job but not yet bound."""
    ephemeral = ephemeral_ports(path)
    if ephemeral is not None and ephemeral[0] - LOWEST_DRAWN_PORT >= 1024:
        draw = random.SystemRandom()
        for _ in range(64):
            port = draw.randrange(LOWEST_DRAWN_PORT, ephemeral[0])
            if port not in avoid and bindable(port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def bindable(port: int) -> bool:
    """Whether a TCP listener could bind ``port`` on every local address now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("", port))
        except OSError:
            return False
        return True


def rendezvous_port(uid: bytes) -> int:
    """The port rank 0's bootstrap listens on, from the job's unique id."""
    from gshmem import _C

    return int(_C.unique_id_describe(uid).rsplit(":", 1)[1])
