"""CPU tests of ring_attention's argument checks and of its ring's neighbours and backend choice
(what needs no GPU: the checks run before anything touches a device)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gshmem import Team, UsageError  # noqa: E402
from gshmem.attention import ops, transport  # noqa: E402


def qkv(b=1, hq=4, hk=2, s=8, d=16, dtype=torch.bfloat16):
    return (torch.zeros(b, h, s, d, dtype=dtype) for h in (hq, hk, hk))


@pytest.mark.parametrize(
    "change,fragment",
    [
        (lambda q, k, v: (q[0], k, v), "must be [batch, heads, seq, dim]"),
        (lambda q, k, v: (q.float(), k, v), "use bfloat16 or float16"),
        (lambda q, k, v: (q, k.half(), v.half()), "q's dtype"),
        (lambda q, k, v: (q, k, v[:, :1]), "one shape"),
        (lambda q, k, v: (q, k[:, :, :4], v[:, :, :4]), "must share batch, seq and dim"),
        (
            lambda q, k, v: (q, k.expand(2, -1, -1, -1), v.expand(2, -1, -1, -1)),
            "must share batch, seq and dim",
        ),
        (lambda q, k, v: (q, k[..., :8], v[..., :8]), "must share batch, seq and dim"),
        (lambda q, k, v: (q[:, :3], k, v), "kv heads must divide q heads"),
        (lambda q, k, v: (q, k, v), "the comm's GPU is cuda:0"),  # CPU tensors
    ],
)
def test_bad_tensors_are_named(change, fragment):
    with pytest.raises(UsageError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        ops._check(*change(*qkv()), 0, None, 2)


def test_bad_documents_are_named():
    cu = torch.tensor([0, 8, 16], dtype=torch.int32)
    with pytest.raises(UsageError, match="need batch 1"):
        ops._check(*qkv(b=2), 0, cu, 2)
    with pytest.raises(UsageError, match="1-D int32"):
        ops._check(*qkv(), 0, cu.long(), 2)
    with pytest.raises(UsageError, match="1-D int32"):
        ops._check(*qkv(), 0, cu[None], 2)
    with pytest.raises(UsageError, match="multiple of 2 x 2"):  # 6 is not a multiple of 4
        ops._check(*qkv(s=8), 0, torch.tensor([0, 6, 16], dtype=torch.int32), 2)
    with pytest.raises(UsageError, match="covers 12 tokens"):
        ops._check(*qkv(s=8), 0, torch.tensor([0, 4, 12], dtype=torch.int32), 2)
    with pytest.raises(UsageError, match="comm's GPU"):  # good documents: only the device fails
        ops._check(*qkv(s=8), 0, cu, 2)


class FakeComm:
    """What Ring and resolve_backend read of a comm: rank, heap base, peer reachability."""

    def __init__(self, rank, reachable):
        self.rank, self.reachable, self.device = rank, reachable, 0

    def heap_info(self):
        return {"heap_base": 1 << 40}

    def ptr(self, local, pe):
        return local + pe if pe in self.reachable else None


def test_ring_neighbours_follow_the_team():
    # PEs 1, 3, 5, 7 of the world form the team; PE 5 is member 2
    ring = transport.Ring(FakeComm(5, set()), Team(1, 2, 4, 2), "nccl")
    assert (ring.world, ring.index, ring.right, ring.left) == (4, 2, 7, 3)
    ring = transport.Ring(FakeComm(7, set()), Team(1, 2, 4, 3), "nccl")
    assert (ring.right, ring.left) == (1, 5)


def test_backend_choice():
    members = [0, 1, 2, 3]
    assert transport.resolve_backend(FakeComm(1, {0, 2}), members, "auto") == "gshmem"
    # a strided team: PE 5 is member 2, its neighbours PEs 3 and 7 (not world ranks 1 and 5)
    assert transport.resolve_backend(FakeComm(5, {3, 7}), [1, 3, 5, 7], "gshmem") == "gshmem"
    assert transport.resolve_backend(FakeComm(1, {0, 2}), members, "gshmem") == "gshmem"
    with pytest.raises(UsageError, match="load/store reachable"):
        transport.resolve_backend(FakeComm(1, {0}), members, "gshmem")
    with pytest.raises(UsageError, match="backend must be one of"):
        transport.resolve_backend(FakeComm(1, {0, 2}), members, "mpi")
    if not torch.distributed.is_initialized():  # no process group here: a clear error
        with pytest.raises(UsageError, match="torch.distributed initialised"):
            transport.resolve_backend(FakeComm(1, {0}), members, "auto")
        with pytest.raises(UsageError, match="torch.distributed initialised"):
            transport.resolve_backend(FakeComm(1, {0, 2}), members, "nccl")
