"""Training and evaluation loops. No file or tracking I/O: progress is reported through a callback."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from pipeline.errors import UserError
from pipeline.runtime import Runtime

# Turns a batch of stored inputs (uint8 images or float features) into model inputs.
PrepareBatch = Callable[[torch.Tensor, bool, torch.Generator], torch.Tensor]
EpochCallback = Callable[[dict], None]


@dataclass(frozen=True)
class Recipe:
    """How to train: optimiser, schedule, batch size and epochs."""

    lr: float
    batch_size: int
    epochs: int
    optimizer: str = "adam"  # adam | adamw
    weight_decay: float = 0.0
    schedule: str = "none"  # none | cosine (after linear warmup)
    warmup_fraction: float = 0.0
    grad_clip: float = 0.0  # max global gradient norm; 0 disables clipping


class NonFiniteLossError(UserError):
    """The loss became NaN or infinite."""


@dataclass(frozen=True)
class Evaluation:
    """Per-image results over a whole set."""

    logits: torch.Tensor  # (N, K) float32
    loss: float  # mean cross-entropy over images
    accuracy: float  # correct / N

    @property
    def predictions(self) -> torch.Tensor:
        return self.logits.argmax(dim=1)


def progress_bar(total: int, description: str, unit: str = "step"):
    """A tqdm bar (steps, rate, time left) on a terminal; nothing in CI or a log (``disable=None``)."""
    from tqdm import tqdm

    return tqdm(total=total, desc=description, unit=unit, disable=None, leave=False, dynamic_ncols=True)


def identity_batch(inputs: torch.Tensor, train: bool, generator: torch.Generator) -> torch.Tensor:
    return inputs


def make_optimizer(parameters, recipe: Recipe) -> torch.optim.Optimizer:
    if recipe.optimizer == "adamw":
        return torch.optim.AdamW(parameters, lr=recipe.lr, weight_decay=recipe.weight_decay)
    return torch.optim.Adam(parameters, lr=recipe.lr, betas=(0.9, 0.999), weight_decay=recipe.weight_decay)


def lr_factor(step: int, total_steps: int, recipe: Recipe) -> float:
    """Linear warmup over ``warmup_fraction`` of the steps, then constant or cosine decay to 0."""
    warmup = int(recipe.warmup_fraction * total_steps)
    if step < warmup:
        return (step + 1) / warmup
    if recipe.schedule == "cosine":
        progress = (step - warmup) / max(1, total_steps - warmup)
        return 0.5 * (1 + math.cos(math.pi * progress))
    return 1.0


@torch.inference_mode()
def evaluate(
    model: nn.Module,
    inputs: torch.Tensor,
    labels: torch.Tensor,
    runtime: Runtime,
    batch_size: int,
    prepare: PrepareBatch = identity_batch,
) -> Evaluation:
    """Logits, mean loss and accuracy over every image (never a mean of per-batch means)."""
    was_training = model.training
    model.eval()
    chunks = []
    with progress_bar(len(inputs), "evaluate", unit="img") as bar:
        for start in range(0, len(inputs), batch_size):
            batch = runtime.to_device(prepare(inputs[start : start + batch_size], False, None))
            with runtime.autocast():
                chunks.append(model(batch).float().cpu())
            bar.update(len(batch))
    model.train(was_training)
    logits = torch.cat(chunks)
    loss = F.cross_entropy(logits, labels, reduction="sum").item() / len(labels)
    accuracy = (logits.argmax(dim=1) == labels).sum().item() / len(labels)
    return Evaluation(logits=logits, loss=loss, accuracy=accuracy)


def train(
    model: nn.Module,
    train_inputs: torch.Tensor,
    train_labels: torch.Tensor,
    recipe: Recipe,
    runtime: Runtime,
    generator: torch.Generator,
    prepare: PrepareBatch = identity_batch,
    test_inputs: torch.Tensor | None = None,
    test_labels: torch.Tensor | None = None,
    eval_batch_size: int | None = None,
    on_epoch: EpochCallback | None = None,
    description: str = "train",
) -> list[dict]:
    """Trains ``model`` in place with cross-entropy; returns one record per epoch.

    Each record has ``epoch``, ``train_loss`` and ``train_acc`` (over every image seen that epoch,
    weighted per image) and, when a test set is given, ``test_loss`` and ``test_acc``.

    Raises:
        NonFiniteLossError: the loss became NaN or infinite, with the epoch, step and likely cause.
    """
    parameters = [p for p in model.parameters() if p.requires_grad]
    optimizer = make_optimizer(parameters, recipe)
    steps_per_epoch = math.ceil(len(train_labels) / recipe.batch_size)
    total_steps = steps_per_epoch * recipe.epochs
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(step, total_steps, recipe))
    history = []
    bar = progress_bar(total_steps, description)
    for epoch in range(1, recipe.epochs + 1):
        model.train()
        order = torch.randperm(len(train_labels), generator=generator)
        loss_sum, correct = 0.0, 0
        for step, start in enumerate(range(0, len(order), recipe.batch_size), start=1):
            index = order[start : start + recipe.batch_size]
            inputs = runtime.to_device(prepare(train_inputs[index], True, generator))
            labels = runtime.to_device(train_labels[index])
            with runtime.autocast():
                logits = model(inputs)
            loss = F.cross_entropy(logits.float(), labels)
            if not torch.isfinite(loss):
                raise NonFiniteLossError(
                    f"the training loss became {loss.item()} at epoch {epoch}, step {step}; the learning rate "
                    f"({recipe.lr}) is probably too high for this model, or the inputs hold NaN. Lower the lr in "
                    "params.yaml (warmup_fraction and grad_clip help too, where the stage has them)"
                )
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if recipe.grad_clip > 0:
                nn.utils.clip_grad_norm_(parameters, recipe.grad_clip)
            optimizer.step()
            scheduler.step()
            loss_sum += loss.item() * len(labels)
            correct += (logits.argmax(dim=1) == labels).sum().item()
            bar.update(1)
        record = {"epoch": epoch, "train_loss": loss_sum / len(order), "train_acc": correct / len(order)}
        if test_inputs is not None:
            result = evaluate(model, test_inputs, test_labels, runtime, eval_batch_size or len(test_labels), prepare)
            record.update(test_loss=result.loss, test_acc=result.accuracy)
        history.append(record)
        if on_epoch is not None:
            on_epoch(record)
    bar.close()
    return history


@torch.inference_mode()
def extract_features(
    backbone: nn.Module, inputs: torch.Tensor, runtime: Runtime, batch_size: int, prepare: PrepareBatch
) -> torch.Tensor:
    """The frozen backbone's pooled features (N, D) in float32, computed once."""
    backbone.eval()
    chunks = []
    with progress_bar(len(inputs), "features", unit="img") as bar:
        for start in range(0, len(inputs), batch_size):
            batch = runtime.to_device(prepare(inputs[start : start + batch_size], False, None))
            with runtime.autocast():
                chunks.append(backbone.forward_features(batch).float().cpu())
            bar.update(len(batch))
    return torch.cat(chunks)


def count_parameters(model: nn.Module, trainable_only: bool = False) -> int:
    """Number of parameters in ``model`` (only those with ``requires_grad`` if ``trainable_only``)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
