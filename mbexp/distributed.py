"""torchrun DDP: who am I, and the few collective operations the trainer needs."""

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Dist:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def init(device_type: str) -> Dist:
    """Join the process group torchrun set up (NCCL on GPUs, gloo on CPUs); a no-op otherwise."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size == 1:
        return Dist()
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device_type == "cuda" else "gloo")
    return Dist(dist.get_rank(), world_size, int(os.environ.get("LOCAL_RANK", "0")))


def mean(value: torch.Tensor, ddp: Dist) -> torch.Tensor:
    """The mean of a scalar tensor over all ranks."""
    if ddp.enabled:
        value = value.detach().clone()
        dist.all_reduce(value, op=dist.ReduceOp.SUM)
        value /= ddp.world_size
    return value


def barrier(ddp: Dist) -> None:
    if ddp.enabled:
        dist.barrier()


def shutdown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
