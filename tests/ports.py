"""TCP ports that a GPU test binds for its job (JAX's coordinator)."""

from __future__ import annotations

import os
import random

from gshmem.tcp_ports import bindable

# Below Linux's ephemeral range (32768 on): a port that binding port 0 gave out can become the local
# port of any process's outgoing connection before the job binds it (seen in a parallel run of
# the suite: "Address already in use"; gshmem.tcp_ports draws the launcher's ports so too). A
# block of its own for each pytest-xdist worker.
PRIVATE_PORTS, PORTS_PER_WORKER, EPHEMERAL = 20000, 256, 32768


def private_port() -> int:
    """A TCP port free on this host now, from this pytest-xdist worker's own block below the
    ephemeral range: no other worker picks it and no outgoing connection takes it meanwhile."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    blocks = (EPHEMERAL - PRIVATE_PORTS) // PORTS_PER_WORKER
    first = PRIVATE_PORTS + PORTS_PER_WORKER * (int(worker) % blocks if worker.isdigit() else 0)
    for port in random.sample(range(first, first + PORTS_PER_WORKER), PORTS_PER_WORKER):
        if bindable(port):
            return port
    raise RuntimeError(f"no free port in {first}..{first + PORTS_PER_WORKER - 1}")
