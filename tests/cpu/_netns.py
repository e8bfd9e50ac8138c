"""Two "hosts" on one machine for the tests that cross a network: network namespaces joined by a
veth pair, made (and removed) by the fixture. Needs root and iproute2's `ip`; skips otherwise."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid

import pytest

ADDRESSES = ("10.251.0.1", "10.251.0.2")


def can_make_namespaces() -> str | None:
    """None when this process may create network namespaces, else why not."""
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2)"
    if os.geteuid() != 0:
        return "network namespaces need root"
    probe = f"gsh{uuid.uuid4().hex[:8]}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` refused: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


@pytest.fixture(name="two_hosts")
def two_hosts_fixture():
    """Two network namespaces joined by a veth pair (ADDRESSES); yields (names, the command
    prefix that runs a process in each)."""
    why = can_make_namespaces()
    if why is not None:
        pytest.skip(why)
    tag = uuid.uuid4().hex[:6]
    names = [f"gsh{tag}a", f"gsh{tag}b"]
    links = [f"vg{tag}a", f"vg{tag}b"]

    def ip(*args: str, ns: str | None = None) -> None:
        cmd = ["ip", *(["-n", ns] if ns else []), *args]
        subprocess.run(cmd, check=True, capture_output=True, text=True)

    try:
        for ns in names:
            ip("netns", "add", ns)
        ip("link", "add", links[0], "type", "veth", "peer", "name", links[1])
        for i, (ns, link) in enumerate(zip(names, links, strict=True)):
            ip("link", "set", link, "netns", ns)
            ip("addr", "add", f"{ADDRESSES[i]}/24", "dev", link, ns=ns)
            ip("link", "set", link, "up", ns=ns)
            ip("link", "set", "lo", "up", ns=ns)
        yield names, [["ip", "netns", "exec", ns] for ns in names]
    finally:
        for ns in names:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
