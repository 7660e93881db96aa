"""Training and evaluation loops. No file or tracking I/O: progress is reported through a callback."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from pipeline.core.errors import UserError
from pipeline.train.ddp import distributed, global_batch_loss, sum_over_ranks
from pipeline.train.optim import Adam
from pipeline.train.runtime import Runtime
from pipeline.train.schedule import Cooldown, Recipe, lr_factor

log = logging.getLogger(__name__)

# Turns a batch of stored inputs (uint8 images or float features) into model inputs.
PrepareBatch = Callable[[torch.Tensor, bool, torch.Generator], torch.Tensor]
RecordCallback = Callable[[dict], bool | None]  # a true return stops training after this record
# (model, index batch) -> (the batch's mean loss, how many predictions were right, how many were made): an
# objective other than classifying ``inputs`` into ``labels`` (masked patch prediction), run under autocast
StepLoss = Callable[[nn.Module, torch.Tensor], tuple[torch.Tensor, torch.Tensor, int]]


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


def epoch_batches(n: int, batch_size: int, generator: torch.Generator) -> Iterator[torch.Tensor]:
    """Index batches over ``n`` examples: a new shuffle each epoch, whose last batch is short when
    ``batch_size`` does not divide ``n``. Endless; the trainer takes as many as its steps."""
    while True:
        yield from torch.randperm(n, generator=generator).split(batch_size)


def make_optimizer(parameters, recipe: Recipe) -> Adam:
    """Adam or AdamW over every parameter at once (:mod:`pipeline.train.optim`: torch's foreach arithmetic, without
    the per-tensor loop torch picks on a CPU by default, about 330 small ``mul_``/``add_`` calls a step of the
    offline ViT, and without torch.optim's import of ``torch._dynamo``)."""
    return Adam(parameters, lr=recipe.lr, weight_decay=recipe.weight_decay, decoupled=recipe.optimizer == "adamw")


def optimizer_step(loss: torch.Tensor, optimizer: Adam, parameters: list, grad_clip: float) -> None:
    """One update: gradients of ``loss``, clipped to a global norm of ``grad_clip`` (0: not clipped), then the
    optimiser's step at its current rate."""
    optimizer.zero_grad()
    loss.backward()
    if grad_clip > 0:
        nn.utils.clip_grad_norm_(parameters, grad_clip, foreach=True)
    optimizer.step()


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


@dataclass(frozen=True)
class Recording:
    """When and what :func:`train` records. Every ``every`` steps (None: once, at the end) a record: ``epoch`` (the
    record's number: an epoch where ``every`` is an epoch's steps), ``step``, ``train_loss`` and ``train_acc``
    over every image since the last record (weighted per image) and, for each named set of ``evaluations``,
    ``<name>_loss`` and ``<name>_acc`` over all of it, ``eval_batch_size`` images a batch. ``on_record`` sees
    each record; a true return ends training there. ``description`` names the run in its progress bar and log."""

    every: int | None = None
    evaluations: dict[str, tuple[torch.Tensor, torch.Tensor]] | None = None
    eval_batch_size: int = 256
    on_record: RecordCallback | None = None
    description: str = "train"


def train(
    model: nn.Module,
    inputs: torch.Tensor,
    labels: torch.Tensor,
    recipe: Recipe,
    runtime: Runtime,
    generator: torch.Generator,
    *,
    prepare: PrepareBatch = identity_batch,
    recording: Recording = Recording(),
    step_loss: StepLoss | None = None,
    cooldown: Cooldown | None = None,
) -> list[dict]:
    """Trains ``model`` in place with cross-entropy for ``recipe.steps`` steps; returns its records.

    Each step takes the next batch of :func:`epoch_batches` (drawn from ``generator``), prepared through
    ``prepare`` with training on; the records are :class:`Recording`'s, their evaluations scored through
    ``prepare`` with training off. ``step_loss`` replaces the classification objective (``inputs`` and ``labels``
    then only give the data's size; ``train_acc`` is its right / made over the record), one process only.
    ``cooldown`` is the ``plateau`` schedule's decay, begun by ``on_record`` (:func:`train_until_plateau`);
    without one that schedule stays constant.

    Raises:
        NonFiniteLossError: the loss became NaN or infinite, with the epoch, step and likely cause.
    """
    # -- set-up: the batches, the (possibly distributed) model, the optimiser, the running sums
    every = recording.every or recipe.steps
    batches = epoch_batches(len(labels), recipe.batch_size, generator)
    step_model = distributed(model, runtime)
    parameters = [p for p in model.parameters() if p.requires_grad]
    optimizer = make_optimizer(parameters, recipe)
    history = []
    # summed on the device and read once per record: a ``.item()`` per step waits for the device every step
    sums = _RunningSums(runtime.device)
    model.train()
    with progress_bar(recipe.steps, recording.description) as bar:
        for step in range(1, recipe.steps + 1):
            # -- one step: forward, loss, the scheduled rate, backward and update
            index = next(batches)
            if step_loss is not None:
                with runtime.autocast():
                    loss, right, made = step_loss(model, index)
            else:
                loss, right, made = _classification_step(step_model, inputs, labels, index, prepare, generator, runtime)
            # the rate of step k is lr_factor(k - 1): torch's LambdaLR, which this replaces, counts from 0
            optimizer.lr = recipe.lr * lr_factor(step - 1, recipe.steps, recipe, cooldown)
            optimizer_step(loss, optimizer, parameters, recipe.grad_clip)
            sums.add(step, loss.detach(), right, made)
            bar.update(1)
            # -- a record: the sums since the last one and every evaluation, then the caller's say
            if step % every == 0 or step == recipe.steps:
                record = _record(model, sums, len(history) + 1, step, every, recipe, runtime, prepare, recording)
                history.append(record)
                if recording.on_record is not None and recording.on_record(record):
                    break
    return history


class _RunningSums:
    """A record's training loss and accuracy summed on the device, and the first step whose loss is not finite
    (0 while every loss is): device ops only, read once per record."""

    def __init__(self, device: torch.device):
        self.loss = torch.zeros((), device=device)
        self.correct = torch.zeros((), dtype=torch.int64, device=device)
        self.first_bad = torch.zeros((), dtype=torch.int64, device=device)
        self.seen = 0

    def add(self, step: int, loss: torch.Tensor, right: torch.Tensor, made: int) -> None:
        self.first_bad = torch.where((self.first_bad == 0) & ~torch.isfinite(loss), step, self.first_bad)
        self.loss += loss * made
        self.correct += right
        self.seen += made

    def reset(self) -> None:
        self.loss.zero_()
        self.correct.zero_()
        self.seen = 0


def _classification_step(
    step_model: nn.Module, inputs: torch.Tensor, labels: torch.Tensor, index: torch.Tensor, prepare: PrepareBatch,
    generator: torch.Generator, runtime: Runtime,
) -> tuple[torch.Tensor, torch.Tensor, int]:  # fmt: skip
    """One batch's cross-entropy over the global batch, its right answers and its size."""
    # every rank prepares the whole batch, so that augmentation draws keep the generators in step
    batch_inputs, batch_labels = prepare(inputs[index], True, generator), labels[index]
    if runtime.world_size > 1:  # this rank's shard of the global batch
        shard = slice(runtime.rank, None, runtime.world_size)
        batch_inputs, batch_labels = batch_inputs[shard], batch_labels[shard]
    batch_inputs, batch_labels = runtime.to_device(batch_inputs), runtime.to_device(batch_labels)
    with runtime.autocast():
        logits = step_model(batch_inputs)
    loss = global_batch_loss(logits.float(), batch_labels, len(index), runtime)
    return loss, (logits.detach().argmax(dim=1) == batch_labels).sum(), len(index)


def _record(
    model: nn.Module, sums: _RunningSums, number: int, step: int, every: int, recipe: Recipe, runtime: Runtime,
    prepare: PrepareBatch, recording: Recording,
) -> dict:  # fmt: skip
    """The record at ``step`` from the sums since the last one (then reset) and the evaluations; raises
    :class:`NonFiniteLossError` if a loss since the start was not finite."""
    bad_step = int(sums.first_bad.item())
    if bad_step:
        epoch, step_in_epoch = divmod(bad_step - 1, every)
        raise NonFiniteLossError(
            f"the training loss became {sums.loss.item()} at epoch {epoch + 1}, step {step_in_epoch + 1}; "
            f"the learning rate ({recipe.lr}) is probably too high for this model, or the inputs hold "
            "NaN. Lower the lr in params.yaml (warmup_fraction and grad_clip help too, where the stage "
            "has them)"
        )
    record = {
        "epoch": number,
        "step": step,
        "train_loss": sums.loss.item() / sums.seen,
        "train_acc": sum_over_ranks(int(sums.correct.item()), runtime) / sums.seen,
    }
    for name, (eval_inputs, eval_labels) in (recording.evaluations or {}).items():
        result = evaluate(model, eval_inputs, eval_labels, runtime, recording.eval_batch_size, prepare)
        record.update({f"{name}_loss": result.loss, f"{name}_acc": result.accuracy})
    if log.isEnabledFor(logging.DEBUG):  # the line is built only where it is shown
        log.debug(
            f"{recording.description} step {step}/{recipe.steps}: "
            + ", ".join(f"{k} {v:.4f}" for k, v in record.items() if k not in ("epoch", "step"))
        )
    sums.reset()
    return record


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
