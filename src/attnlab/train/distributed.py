"""Data-parallel training under ``torchrun``: the process group, sums over the replicas, and
the DistributedDataParallel wrapper. Without a process group everything here is a no-op for
one process (rank 0 of 1)."""

from __future__ import annotations

import inspect
import os
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

__all__ = [
    "all_gather_objects",
    "all_reduce_sum",
    "barrier",
    "destroy_distributed",
    "init_distributed",
    "launched_world",
    "resolve_device",
    "world",
    "wrap_ddp",
]


def init_distributed(backend: str | None = None) -> tuple[int, int]:
    """Join the process group described by ``torchrun``'s environment; return
    ``(rank, world_size)``.

    Reads ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``. The
    backend defaults to NCCL when CUDA is available (each process then uses GPU
    ``LOCAL_RANK``) and gloo otherwise. Without ``RANK`` / ``WORLD_SIZE`` in the environment
    (a plain ``python`` run) nothing is initialised and ``(0, 1)`` is returned; if the group
    is already initialised, its rank and size are returned.
    """
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return 0, 1
    if not dist.is_available():
        raise RuntimeError("init_distributed: this torch build has no torch.distributed")
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend, rank=rank, world_size=world_size)
    return rank, world_size


def launched_world() -> tuple[int, int]:
    """``(rank, world_size)`` as ``torchrun``'s environment gives them to this process
    (``RANK``, ``WORLD_SIZE``), before any process group exists: ``(0, 1)`` without them. What
    a process does before :func:`init_distributed` (preparing data, which must not sit in a
    collective with a timeout) is decided by it.

    Raises:
        ValueError: ``RANK`` or ``WORLD_SIZE`` is not a whole number, or out of range.
    """
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return 0, 1
    values = []
    for name in ("RANK", "WORLD_SIZE"):
        try:
            values.append(int(os.environ[name]))
        except ValueError:
            raise ValueError(
                f"{name}: expected a whole number (set by torchrun), got {os.environ[name]!r}"
            ) from None
    rank, world_size = values
    if not 0 <= rank < world_size:
        raise ValueError(f"RANK: expected 0 <= RANK < WORLD_SIZE = {world_size}, got {rank}")
    return rank, world_size


def destroy_distributed() -> None:
    """Leave the process group, if one was initialised (call at the end of a torchrun script)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def world() -> tuple[int, int]:
    """``(rank, world_size)`` of the process group, or ``(0, 1)`` without one."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def barrier(world_size: int) -> None:
    """Wait for every replica (nothing to wait for with one)."""
    if world_size > 1:
        dist.barrier()


def all_reduce_sum(values: Sequence[float], device: torch.device, world_size: int) -> list[float]:
    """Sum ``values`` over the replicas (float64; exact for counts < 2^53)."""
    if world_size == 1:
        return [float(v) for v in values]
    on = device if dist.get_backend() == "nccl" else torch.device("cpu")
    tensor = torch.tensor(list(values), dtype=torch.float64, device=on)
    dist.all_reduce(tensor)
    return tensor.tolist()  # type: ignore[no-any-return]


def all_gather_objects(value: Any, world_size: int) -> list[Any]:
    """Every replica's ``value`` (JSON-like), in rank order."""
    if world_size == 1:
        return [value]
    gathered: list[Any] = [None] * world_size
    dist.all_gather_object(gathered, value)
    return gathered


# The models' buffers are fixed tables (positional encodings, grown lazily per process), not
# statistics: DDP must not broadcast them before each forward. (torch >= 2.10 renamed the
# option; the old name warns there.)
_NO_BUFFER_SYNC = (
    {"forward_sync_buffers": False}
    if "forward_sync_buffers" in inspect.signature(nn.parallel.DistributedDataParallel).parameters
    else {"broadcast_buffers": False}
)


def wrap_ddp(model: nn.Module, device: torch.device) -> nn.parallel.DistributedDataParallel:
    """``model`` in DistributedDataParallel (gradients averaged over the replicas)."""
    return nn.parallel.DistributedDataParallel(
        model,
        device_ids=[device.index] if device.type == "cuda" else None,
        **_NO_BUFFER_SYNC,  # type: ignore[arg-type]
    )


def resolve_device(name: str, world_size: int) -> torch.device:
    """The device of ``TrainConfig.device`` (``auto``: CUDA when available)."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda":
        if not torch.cuda.is_available():
            raise ValueError("device: 'cuda' was requested but CUDA is not available")
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        device = torch.device("cpu")
    if world_size > 1 and dist.get_backend() == "nccl" and device.type != "cuda":
        raise ValueError("device: the NCCL process group needs device 'cuda' (or 'auto')")
    return device
