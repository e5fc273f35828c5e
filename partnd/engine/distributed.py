"""torchrun detection and the few collectives the trainer needs (nanoGPT style).

A process is part of a distributed run when ``torchrun`` set ``RANK``, ``WORLD_SIZE`` and
``LOCAL_RANK`` with ``WORLD_SIZE > 1``. The process group uses NCCL on CUDA and gloo on CPU; each
rank drives ``cuda:LOCAL_RANK``. Without torchrun everything degrades to a single process and every
helper here is a no-op.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from partnd._validation import check

__all__ = ["DistributedContext", "resolve_device", "setup_distributed"]


def resolve_device(preference: str, local_rank: int = 0) -> torch.device:
    """Turn a config ``device`` string into a device.

    Args:
        preference: ``"auto"`` (CUDA when available, else CPU), ``"cpu"``, ``"cuda"`` or
            ``"cuda:K"``.
        local_rank: Rank on this node; selects the GPU for ``"auto"``/``"cuda"``.
    """
    if preference == "auto":
        preference = "cuda" if torch.cuda.is_available() else "cpu"
    if preference.startswith("cuda"):
        check(torch.cuda.is_available(), "device", "'cpu' or 'auto' (no CUDA device)", preference)
        return torch.device(preference if ":" in preference else f"cuda:{local_rank}")
    return torch.device(preference)


@dataclass
class DistributedContext:
    """Where this process stands in the run.

    Attributes:
        rank: Global rank (0 when not distributed).
        local_rank: Rank on this node.
        world_size: Number of processes.
        device: Device this rank trains on.
        owns_group: Whether :func:`setup_distributed` created the process group (and so must
            destroy it in :meth:`close`).
    """

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    owns_group: bool = False

    @property
    def is_distributed(self) -> bool:
        """More than one process."""
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """Rank 0, the only rank that writes files and shows progress."""
        return self.rank == 0

    def barrier(self) -> None:
        """Wait for every rank (no-op in a single process)."""
        if self.is_distributed:
            dist.barrier()

    def all_reduce_mean(self, values: torch.Tensor) -> torch.Tensor:
        """Mean of ``values`` over ranks (returns a new tensor)."""
        if not self.is_distributed:
            return values.clone()
        reduced = values.detach().clone()
        dist.all_reduce(reduced, op=dist.ReduceOp.SUM)
        return reduced / self.world_size

    def all_reduce_min(self, values: torch.Tensor) -> torch.Tensor:
        """Element-wise minimum of ``values`` over ranks (returns a new tensor)."""
        if not self.is_distributed:
            return values.clone()
        reduced = values.detach().clone()
        dist.all_reduce(reduced, op=dist.ReduceOp.MIN)
        return reduced

    def gather_objects(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, indexed by rank (picklable objects)."""
        if not self.is_distributed:
            return [obj]
        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, obj)
        return gathered

    def close(self) -> None:
        """Destroy the process group if this context created it."""
        if self.owns_group and dist.is_initialized():
            dist.destroy_process_group()
            self.owns_group = False


def setup_distributed(device: str = "auto") -> DistributedContext:
    """Detect torchrun from the environment and join (or reuse) the process group.

    Args:
        device: The config's device preference (see :func:`resolve_device`).

    Returns:
        The context; a single-process context when ``WORLD_SIZE`` is unset or 1.
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1 and not dist.is_initialized():
        return DistributedContext(device=resolve_device(device))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    resolved = resolve_device(device, local_rank)
    owns_group = False
    if not dist.is_initialized():
        if resolved.type == "cuda":
            torch.cuda.set_device(resolved)
        dist.init_process_group(backend="nccl" if resolved.type == "cuda" else "gloo")
        owns_group = True
    return DistributedContext(
        rank=dist.get_rank(),
        local_rank=local_rank,
        world_size=dist.get_world_size(),
        device=resolved,
        owns_group=owns_group,
    )
