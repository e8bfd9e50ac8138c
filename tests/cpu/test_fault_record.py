"""Fault records on the CPU (docs/reliability.md): what gshmem.FaultError says for each record a
bounded device wait can leave."""

from __future__ import annotations

import ctypes

import pytest

import gshmem
from gshmem import _C
from gshmem.device import DeviceStruct, FaultStruct

WAIT_SIGNAL, WAIT_BARRIER, WAIT_COLLECTIVE, WAIT_MOE, WAIT_PROXY, WAIT_PACKETS = 1, 3, 4, 5, 6, 7
TIMEOUT, ABORT, OTHER, PROXY = 1, 2, 3, 4
GE = 3


def describe(my_pe: int = 0, **fields: int) -> str:
    record = FaultStruct(recorded=1, **fields)
    return _C.describe_fault(bytes(record), my_pe)


def test_device_state_carries_the_fault_record_and_timeout():
    assert _C.DEVICE_STATE_VERSION == 5
    names = [name for name, _ in DeviceStruct._fields_]
    # appended: the ABI grows only (version 2 the fault record, version 3 the proxy path,
    # version 4 the values fetched through it, version 5 its inline data)
    assert names[-11:-8] == ["timeout_ns", "fault", "fault_claim"]
    assert names[-8:] == ["proxy_slots", "proxy_tail", "proxy_head", "proxy_capacity",
                          "proxy_retired", "proxy_failed", "proxy_results",
                          "proxy_inline"]  # fmt: skip
    assert ctypes.sizeof(FaultStruct) == _C.FAULT_SIZE == 64


def test_timeout_names_the_peer_the_wait_and_the_values():
    msg = describe(
        2, op=WAIT_SIGNAL, cause=TIMEOUT, pe=3, cmp=GE, block=4, thread=7, addr=0x7F00001000,
        expected=5, seen=4, waited_ns=2_500_000_000,
    )  # fmt: skip
    assert msg.startswith("PE 2: signal_wait_until gave up waiting for PE 3 after 2.5 s")
    assert "GSHMEM_TIMEOUT" in msg and "is PE 3 alive" in msg
    assert "0x7f00001000 to be >= 5; it was 4 (block 4, thread 7)" in msg
    assert msg.endswith("The comm can only be aborted now.")


@pytest.mark.parametrize(
    ("op", "name"),
    [(WAIT_BARRIER, "a device barrier"), (WAIT_COLLECTIVE, "a collective kernel"),
     (WAIT_MOE, "a gshmem.moe kernel"), (WAIT_PROXY, "a proxy-path operation"),
     (WAIT_PACKETS, "wait_packets"), (99, "a device wait")],
)  # fmt: skip
def test_each_wait_is_named(op, name):
    assert describe(op=op, cause=TIMEOUT, pe=1, cmp=GE).startswith(f"PE 0: {name} gave up")


def test_abort_and_follow_on_failures_say_why_they_stopped():
    aborted = describe(op=WAIT_BARRIER, cause=ABORT, pe=1, cmp=GE)
    assert "PE 0: a device barrier waiting for PE 1 stopped because the comm was aborted" in aborted
    other = describe(op=WAIT_COLLECTIVE, cause=OTHER, pe=3, cmp=GE)
    assert "stopped because another wait of this comm had failed" in other
    proxy = describe(op=WAIT_PROXY, cause=PROXY, pe=2, cmp=-1)
    assert (
        "PE 0: a proxy-path operation waiting for PE 2 stopped because the comm's proxy "
        "thread failed" in proxy
    )


def test_unknown_peer_and_no_comparison():
    msg = describe(op=WAIT_SIGNAL, cause=TIMEOUT, pe=-1, cmp=-1)
    assert "waiting for a peer" in msg and "Waited for the word" not in msg


def test_a_record_of_the_wrong_size_is_refused():
    with pytest.raises(gshmem.UsageError, match="gshmem_fault_t is 64 bytes"):
        _C.describe_fault(b"\0" * 8, 0)


def test_fault_error_is_a_gshmem_error():
    assert issubclass(gshmem.FaultError, gshmem.Error)
