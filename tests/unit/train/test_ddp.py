"""pipeline.train.ddp in one process: the model unwrapped, the plain mean loss, values unchanged (two processes
under torchrun: tests/unit/test_distributed.py)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from helpers import CPU
from torch import nn

from pipeline.train.ddp import distributed, from_rank_zero, global_batch_loss, sum_over_ranks


def test_one_process_trains_the_model_itself_with_the_plain_mean_cross_entropy():
    model = nn.Linear(4, 3)
    assert distributed(model, CPU) is model
    logits, labels = torch.randn(5, 3, generator=torch.Generator().manual_seed(0)), torch.tensor([0, 2, 1, 1, 0])
    torch.testing.assert_close(global_batch_loss(logits, labels, 5, CPU), F.cross_entropy(logits, labels))


def test_one_process_agrees_with_itself():
    assert sum_over_ranks(7, CPU) == 7 and from_rank_zero(0.25, CPU) == 0.25
