"""DistributedDataParallel under torchrun: the wrapped model, the global batch's loss, and values agreed over
ranks. One process: every function is the identity or the plain computation."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from pipeline.train.runtime import Runtime


def distributed(model: nn.Module, runtime: Runtime) -> nn.Module:
    """``model`` wrapped in DistributedDataParallel under torchrun (gradients averaged over ranks after each
    backward), else ``model`` itself. Its parameters are the model's own, so the caller's model is trained."""
    if runtime.world_size == 1 or not any(p.requires_grad for p in model.parameters()):
        return model
    from torch.nn.parallel import DistributedDataParallel

    device_ids = [runtime.device.index] if runtime.device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=device_ids)


def global_batch_loss(logits: torch.Tensor, labels: torch.Tensor, batch_size: int, runtime: Runtime) -> torch.Tensor:
    """Mean cross-entropy over the global batch. One process: ``F.cross_entropy``. Under DDP, this rank's
    sum scaled by ``world_size / batch_size``, so that DDP's average of the ranks' gradients is the gradient
    of the global batch's mean whatever the shard sizes; the returned value is the global mean on every rank
    (one all-reduce of a scalar, which also lets every rank see a non-finite loss at the same step)."""
    if runtime.world_size == 1:
        return F.cross_entropy(logits, labels)
    import torch.distributed as dist

    local = F.cross_entropy(logits, labels, reduction="sum") * (runtime.world_size / batch_size)
    total = local.detach().clone()
    dist.all_reduce(total)
    # the backward pass follows ``local``; the value reported is the global mean
    return local + (total / runtime.world_size - local).detach()


def sum_over_ranks(count: int, runtime: Runtime) -> int:
    """An integer count summed over the ranks of a torchrun job (itself in one process)."""
    if runtime.world_size == 1:
        return count
    import torch.distributed as dist

    total = torch.tensor([count], dtype=torch.int64, device=runtime.device)  # NCCL reduces GPU tensors only
    dist.all_reduce(total)
    return int(total.item())


def from_rank_zero(value: float, runtime: Runtime) -> float:
    """Rank 0's ``value`` on every rank of a torchrun job (itself in one process)."""
    if runtime.world_size == 1:
        return value
    import torch.distributed as dist

    tensor = torch.tensor([value], dtype=torch.float64, device=runtime.device)
    dist.broadcast(tensor, src=0)
    return float(tensor.item())
