"""pipeline.train.optim: Adam and AdamW, bit for bit torch.optim's foreach implementations, without importing dynamo."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch import nn

from pipeline.train.optim import Adam


def trained_weights(make_optimizer, set_lr, steps: int = 12) -> list[torch.Tensor]:
    """A small MLP with an unused layer (no gradient, so no update) trained ``steps`` steps at a changing rate."""
    torch.manual_seed(0)
    body = nn.Sequential(nn.Linear(5, 7), nn.GELU(), nn.Linear(7, 3))
    model = nn.ModuleDict({"body": body, "unused": nn.Linear(2, 2)})
    inputs, labels = torch.randn(16, 5), torch.randint(0, 3, (16,))
    optimizer = make_optimizer(list(model.parameters()))
    for step in range(steps):
        set_lr(optimizer, 1e-2 * (1 + step) / steps)
        loss = nn.functional.cross_entropy(model["body"](inputs), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return [p.detach().clone() for p in model.parameters()]


def set_torch_lr(optimizer, lr: float) -> None:
    optimizer.param_groups[0]["lr"] = lr


def set_our_lr(optimizer, lr: float) -> None:
    optimizer.lr = lr


@pytest.mark.parametrize("decoupled", [False, True])
@pytest.mark.parametrize("weight_decay", [0.0, 0.3])
def test_our_adam_and_adamw_give_torchs_foreach_weights_bit_for_bit(decoupled, weight_decay):
    torch_class = torch.optim.AdamW if decoupled else torch.optim.Adam
    theirs = trained_weights(lambda ps: torch_class(ps, lr=1e-2, weight_decay=weight_decay, foreach=True), set_torch_lr)
    ours = trained_weights(lambda ps: Adam(ps, lr=1e-2, weight_decay=weight_decay, decoupled=decoupled), set_our_lr)
    assert all(torch.equal(a, b) for a, b in zip(theirs, ours, strict=True))
    before = trained_weights(lambda ps: Adam(ps, lr=1e-2), set_our_lr, steps=0)
    assert not torch.equal(ours[0], before[0]) and torch.equal(ours[-1], before[-1])  # trained; the unused one not


def test_adam_and_adamw_differ_where_the_decay_is_coupled():
    adam = trained_weights(lambda ps: Adam(ps, lr=1e-2, weight_decay=0.3), set_our_lr)
    adamw = trained_weights(lambda ps: Adam(ps, lr=1e-2, weight_decay=0.3, decoupled=True), set_our_lr)
    assert not torch.equal(adam[0], adamw[0])
    assert (Adam([], 1e-3).name, Adam([], 1e-3, decoupled=True).name) == ("Adam", "AdamW")


def test_a_training_step_does_not_import_torch_dynamo():
    code = (
        "import sys, torch\n"
        "from pipeline.train.optim import Adam\n"
        "w = torch.nn.Parameter(torch.ones(3)); o = Adam([w], lr=0.1, weight_decay=0.1, decoupled=True)\n"
        "(w * w).sum().backward(); torch.nn.utils.clip_grad_norm_([w], 1.0, foreach=True); o.step(); o.zero_grad()\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
