"""Ports for listeners bound later (gshmem.tcp_ports): drawn below the kernel's ephemeral range,
busy and avoided ones skipped, the kernel's choice when there is no room."""

from __future__ import annotations

import socket
from pathlib import Path

from gshmem import tcp_ports


class _Draws:
    """random.SystemRandom's stand-in: randrange returns the given ports in turn."""

    def __init__(self, ports: list[int]) -> None:
        self.ports = list(ports)

    def randrange(self, lo: int, hi: int) -> int:
        port = self.ports.pop(0)
        assert lo <= port < hi
        return port


def test_free_port_draws_below_the_ephemeral_range(tmp_path: Path, monkeypatch) -> None:
    """A port that bind(0) hands out can be taken by any connection before its listener binds
    it; drawn below the kernel's ephemeral range, skipping busy and avoided ports, it cannot."""
    ranges = tmp_path / "range"
    ranges.write_text("40000\t60999\n")
    assert tcp_ports.ephemeral_ports(str(ranges)) == (40000, 60999)
    for _ in range(20):
        assert tcp_ports.LOWEST_DRAWN_PORT <= tcp_ports.free_port(path=str(ranges)) < 40000
    with socket.socket() as busy:
        taken = tcp_ports.free_port(path=str(ranges))
        busy.bind(("127.0.0.1", taken))
        busy.listen()
        free = tcp_ports.free_port(path=str(ranges))
        avoided = tcp_ports.free_port(path=str(ranges))
        draws = _Draws([taken, avoided, free])
        monkeypatch.setattr(tcp_ports.random, "SystemRandom", lambda: draws)
        # the busy port fails to bind and the avoided one is skipped: the third draw
        assert tcp_ports.free_port(avoid=[avoided], path=str(ranges)) == free


def test_free_port_falls_back_to_the_kernels_choice(tmp_path: Path) -> None:
    """No room below the range (or no range): the port is the kernel's bind(0) choice, so it lies
    in the host's real ephemeral range, not among the ports a draw would take."""
    narrow = tmp_path / "range"
    narrow.write_text("16000 60999")  # room for fewer than 1024 draws below it
    assert tcp_ports.ephemeral_ports(str(tmp_path / "absent")) is None
    real = tcp_ports.ephemeral_ports()
    for path in (narrow, tmp_path / "absent"):
        port = tcp_ports.free_port(path=str(path))
        assert not tcp_ports.LOWEST_DRAWN_PORT <= port < 16000
        if real is not None:
            assert real[0] <= port <= real[1]
        assert tcp_ports.bindable(port)


def test_rendezvous_port_reads_the_ids_port() -> None:
    from gshmem import _C

    assert tcp_ports.rendezvous_port(_C.unique_id_create("127.0.0.1", 24242, False)) == 24242
