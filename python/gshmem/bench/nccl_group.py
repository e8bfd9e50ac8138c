"""The NCCL baseline's process group: torch.distributed (NCCL) joined with the launched job's
ranks, shared by every suite that compares against NCCL."""

from __future__ import annotations

import datetime
import os


def join_nccl(rank: int, nranks: int, device: int) -> str:
    """Collective: joins torch.distributed with backend NCCL; returns '' or why not.

    Under torchrun (MASTER_ADDR set) through its rendezvous; otherwise a store on 127.0.0.1 whose
    port is GSHMEM_BENCH_PORT (which gshmem.run sets on one host), else the port after
    gshmem.run's rendezvous."""
    import torch
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_nccl_available():
        return "torch.distributed with NCCL is not available"
    if dist.is_initialized():
        return "" if dist.get_backend() == "nccl" else "torch.distributed uses another backend"
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    timeout = datetime.timedelta(seconds=120)
    if "MASTER_ADDR" in os.environ:
        dist.init_process_group(
            "nccl", rank=rank, world_size=nranks, timeout=timeout,
            device_id=torch.device("cuda", device),
        )  # fmt: skip
        return ""
    port = int(os.environ.get("GSHMEM_BENCH_PORT", "0") or 0)
    if not port:
        from gshmem.tcp_ports import rendezvous_port

        uid = os.environ.get("GSHMEM_UNIQUE_ID", "")
        if not uid:
            return "no rendezvous for torch.distributed under this launcher (use gshmem.run)"
        port = rendezvous_port(bytes.fromhex(uid)) + 1
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
