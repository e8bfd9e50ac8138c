"""The NCCL baseline's process group: torch.distributed (NCCL) joined with the launched job's
ranks, shared by every suite that compares against NCCL."""

from __future__ import annotations

import datetime
import os


def join_nccl(rank: int, nranks: int, device: int) -> str:
    """Collective: joins torch.distributed with backend NCCL on 127.0.0.1; returns '' or why not.

    The store's port is GSHMEM_BENCH_PORT, else the port after gshmem.run's rendezvous."""
    import torch
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_nccl_available():
        return "torch.distributed with NCCL is not available"
    if dist.is_initialized():
        return "" if dist.get_backend() == "nccl" else "torch.distributed uses another backend"
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    port = int(os.environ.get("GSHMEM_BENCH_PORT", "0") or 0)
    if not port:
        from gshmem import _C

        uid = os.environ.get("GSHMEM_UNIQUE_ID", "")
        port = int(_C.unique_id_describe(bytes.fromhex(uid)).rsplit(":", 1)[1]) + 1
    timeout = datetime.timedelta(seconds=120)
    store = dist.TCPStore("127.0.0.1", port, nranks, rank == 0, timeout=timeout)
    dist.init_process_group(
        "nccl",
        store=store,
        rank=rank,
        world_size=nranks,
        timeout=timeout,
        device_id=torch.device("cuda", device),
    )
    return ""
