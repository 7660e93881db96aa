"""Training and evaluation loops. No file or tracking I/O: progress is reported through a callback."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from pipeline.core.errors import UserError
from pipeline.train.optim import Adam
from pipeline.train.runtime import Runtime

log = logging.getLogger(__name__)

# Turns a batch of stored inputs (uint8 images or float features) into model inputs.
PrepareBatch = Callable[[torch.Tensor, bool, torch.Generator], torch.Tensor]
RecordCallback = Callable[[dict], bool | None]  # a true return stops training after this record
# (model, index batch) -> (the batch's mean loss, how many predictions were right, how many were made): an
# objective other than classifying ``inputs`` into ``labels`` (masked patch prediction), run under autocast
StepLoss = Callable[[nn.Module, torch.Tensor], tuple[torch.Tensor, torch.Tensor, int]]


@dataclass(frozen=True)
class Recipe:
    """How to train: optimiser, schedule, batch size and the number of optimiser steps.

    Steps are the one budget the trainer counts; an epoch-based recipe converts with :func:`epoch_steps`.
    """

    lr: float
    batch_size: int
    steps: int
    optimizer: str  # adam (weight decay added to the gradient, L2) | adamw (decoupled decay)
    weight_decay: float
    schedule: str  # none | cosine | plateau (after linear warmup; plateau: see :class:`Cooldown`)
    warmup_fraction: float
    grad_clip: float  # max global gradient norm; 0 disables clipping
    warmup_steps: int | None = None  # default: warmup_fraction of the steps

    @classmethod
    def of(cls, optimiser, batch_size: int, steps: int, warmup_steps: int | None = None) -> Recipe:
        """The recipe of a params.yaml section with an optimiser's fields (``config.Optimiser``)."""
        return cls(
            lr=optimiser.lr, batch_size=batch_size, steps=steps, optimizer=optimiser.optimizer,
            weight_decay=optimiser.weight_decay, schedule=optimiser.schedule,
            warmup_fraction=optimiser.warmup_fraction, grad_clip=optimiser.grad_clip, warmup_steps=warmup_steps,
        )  # fmt: skip


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


def epoch_steps(epochs: int, n: int, batch_size: int) -> int:
    """Optimiser steps in ``epochs`` passes over ``n`` examples (each epoch's last batch may be short)."""
    return epochs * math.ceil(n / batch_size)


def epoch_recipe(optimiser, n: int, batch_size: int, epochs: int | None = None) -> tuple[Recipe, int]:
    """The one binding from epochs to steps: the recipe of ``epochs`` (default ``optimiser.epochs``) passes over
    ``n`` examples, and the steps of one epoch (every stage records once per epoch)."""
    steps_per_epoch = epoch_steps(1, n, batch_size)
    epochs = optimiser.epochs if epochs is None else epochs
    return Recipe.of(optimiser, batch_size, epochs * steps_per_epoch), steps_per_epoch


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


def lr_factor(step: int, total_steps: int, recipe: Recipe, cooldown: Cooldown | None = None) -> float:
    """Linear warmup over ``warmup_steps`` (default ``warmup_fraction`` of the steps), then constant, cosine decay
    to 0 at ``total_steps``, or (``plateau``) constant until ``cooldown`` begins its linear decay to 0."""
    warmup = int(recipe.warmup_fraction * total_steps) if recipe.warmup_steps is None else recipe.warmup_steps
    if step < warmup:
        return (step + 1) / warmup
    if recipe.schedule == "cosine":
        progress = (step - warmup) / max(1, total_steps - warmup)
        return 0.5 * (1 + math.cos(math.pi * progress))
    if recipe.schedule == "plateau" and cooldown is not None:
        return cooldown.factor(step)
    return 1.0


@dataclass
class Cooldown:
    """The ``plateau`` schedule's decay, begun by the validation rule rather than by a step count
    (warmup-stable-decay: Hägele et al. 2024, "Scaling Laws and Compute-Optimal Training Beyond Fixed Training
    Durations", find that a linear cooldown over the last 10-20% of training matches a cosine schedule of the same
    length). The rate stays constant until the validation loss has levelled off: its mean over the last
    ``Stopping.patience`` scores is no lower than over the ``patience`` scores before them (a trend, which one
    lucky score at a constant rate does not set off, as a best-so-far rule is); it then falls linearly to 0 over
    ``fraction`` of the steps so far, and the run ends there. So a run's length is set by its validation curve,
    and the step cap only bounds one that never levels off."""

    fraction: float
    start: int | None = None  # the step the decay began at; None while the rate is constant
    steps: int = 0  # the decay's length, a whole number of scoring intervals

    def begin(self, step: int, eval_every: int) -> None:
        self.start = step
        self.steps = eval_every * max(1, math.ceil(self.fraction * step / eval_every))

    def factor(self, step: int) -> float:
        """The lr factor after ``step`` optimiser steps (1 before the decay)."""
        return 1.0 if self.start is None else max(0.0, 1 - (step - self.start) / self.steps)

    def over(self, step: int) -> bool:
        return self.start is not None and step >= self.start + self.steps


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
    inputs: torch.Tensor,
    labels: torch.Tensor,
    recipe: Recipe,
    runtime: Runtime,
    generator: torch.Generator,
    *,
    batches: Iterator[torch.Tensor] | None = None,
    prepare: PrepareBatch = identity_batch,
    record_every: int | None = None,
    evaluations: dict[str, tuple[torch.Tensor, torch.Tensor]] | None = None,
    eval_batch_size: int = 256,
    on_record: RecordCallback | None = None,
    description: str = "train",
    step_loss: StepLoss | None = None,
    cooldown: Cooldown | None = None,
) -> list[dict]:
    """Trains ``model`` in place with cross-entropy for ``recipe.steps`` steps; returns its records.

    ``batches`` yields index batches into ``inputs`` (default :func:`epoch_batches`, drawn from
    ``generator``). Every ``record_every`` steps (default: once, at the end) a record is made: ``epoch``
    (the record's number: an epoch where ``record_every`` is an epoch's steps), ``step``, ``train_loss`` and
    ``train_acc`` over every image since the last record (weighted per image) and, for each named set in
    ``evaluations``, ``<name>_loss`` and ``<name>_acc`` over all of it, scored through ``prepare`` with
    training off. ``on_record`` sees each record; a true return ends training there. ``step_loss`` replaces
    the classification objective (``inputs`` and ``labels`` then only give the data's size; ``train_acc`` is
    its right / made over the record), one process only. ``cooldown`` is the ``plateau`` schedule's decay,
    begun by ``on_record`` (:func:`train_until_plateau`); without one that schedule stays constant.

    Raises:
        NonFiniteLossError: the loss became NaN or infinite, with the epoch, step and likely cause.
    """
    record_every = record_every or recipe.steps
    if batches is None:
        batches = epoch_batches(len(labels), recipe.batch_size, generator)
    step_model = distributed(model, runtime)
    parameters = [p for p in model.parameters() if p.requires_grad]
    optimizer = make_optimizer(parameters, recipe)
    history = []
    # summed on the device and read once per record: a ``.item()`` per step waits for the device every step
    loss_sum = torch.zeros((), device=runtime.device)
    correct = torch.zeros((), dtype=torch.int64, device=runtime.device)
    first_bad = torch.zeros((), dtype=torch.int64, device=runtime.device)
    seen = 0
    model.train()
    with progress_bar(recipe.steps, description) as bar:
        for step in range(1, recipe.steps + 1):
            index = next(batches)
            if step_loss is not None:
                with runtime.autocast():
                    loss, right, made = step_loss(model, index)
            else:
                # every rank prepares the whole batch, so that augmentation draws keep the generators in step
                batch_inputs, batch_labels = prepare(inputs[index], True, generator), labels[index]
                if runtime.world_size > 1:  # this rank's shard of the global batch
                    shard = slice(runtime.rank, None, runtime.world_size)
                    batch_inputs, batch_labels = batch_inputs[shard], batch_labels[shard]
                batch_inputs, batch_labels = runtime.to_device(batch_inputs), runtime.to_device(batch_labels)
                with runtime.autocast():
                    logits = step_model(batch_inputs)
                loss = global_batch_loss(logits.float(), batch_labels, len(index), runtime)
                right, made = (logits.detach().argmax(dim=1) == batch_labels).sum(), len(index)
            # the rate of step k is lr_factor(k - 1): torch's LambdaLR, which this replaces, counts from 0
            optimizer.lr = recipe.lr * lr_factor(step - 1, recipe.steps, recipe, cooldown)
            optimizer_step(loss, optimizer, parameters, recipe.grad_clip)
            # the first step whose loss is not finite, 0 while every loss is: a device op, no wait
            first_bad = torch.where((first_bad == 0) & ~torch.isfinite(loss.detach()), step, first_bad)
            loss_sum += loss.detach() * made
            correct += right
            seen += made
            bar.update(1)
            if step % record_every == 0 or step == recipe.steps:
                bad_step = int(first_bad.item())
                if bad_step:
                    epoch, step_in_epoch = divmod(bad_step - 1, record_every)
                    raise NonFiniteLossError(
                        f"the training loss became {loss_sum.item()} at epoch {epoch + 1}, step {step_in_epoch + 1}; "
                        f"the learning rate ({recipe.lr}) is probably too high for this model, or the inputs hold "
                        "NaN. Lower the lr in params.yaml (warmup_fraction and grad_clip help too, where the stage "
                        "has them)"
                    )
                mean_loss = loss_sum.item() / seen
                record = {
                    "epoch": len(history) + 1,
                    "step": step,
                    "train_loss": mean_loss,
                    "train_acc": sum_over_ranks(int(correct.item()), runtime) / seen,
                }
                for name, (eval_inputs, eval_labels) in (evaluations or {}).items():
                    result = evaluate(model, eval_inputs, eval_labels, runtime, eval_batch_size, prepare)
                    record.update({f"{name}_loss": result.loss, f"{name}_acc": result.accuracy})
                history.append(record)
                if log.isEnabledFor(logging.DEBUG):  # the line is built only where it is shown
                    log.debug(
                        f"{description} step {step}/{recipe.steps}: "
                        + ", ".join(f"{k} {v:.4f}" for k, v in record.items() if k not in ("epoch", "step"))
                    )
                loss_sum.zero_()
                correct.zero_()
                seen = 0
                if on_record is not None and on_record(record):
                    break
    return history


@dataclass(frozen=True)
class Stopping:
    """The validation rule every trained arm of the curve follows: score the validation split every
    ``eval_every`` steps (and at step 0 where ``score_at_start``), stop after ``patience`` scores without a
    better one or at the recipe's step cap, keep the weights of the best score. Better: a higher validation
    accuracy, or the same accuracy at a lower validation loss (:func:`better_score`). Under the ``plateau``
    schedule, a levelled-off validation loss (over two windows of ``patience`` scores) begins the
    :class:`Cooldown` instead, and the run stops when it ends (still keeping the best-scored weights, before or
    during the decay)."""

    eval_every: int
    patience: int
    score_at_start: bool = False  # fine-tuning starts at the probe's solution: it may be the best it gets
    cooldown_fraction: float = 0.2  # the plateau schedule's decay, as a fraction of the steps before it


def better_score(record: dict, best: dict) -> bool:
    """The selection rule of every arm: validation accuracy first (what the test reports), the loss breaking
    ties (300 validation images give accuracy in steps of 1/300, so ties are common)."""
    if not best:
        return True
    if math.isnan(best["val_loss"]):  # never keep a NaN over a number (NaN compares false both ways)
        return not math.isnan(record["val_loss"]) or record["val_acc"] > best["val_acc"]
    return (record["val_acc"], -record["val_loss"]) > (best["val_acc"], -best["val_loss"])


def train_until_plateau(
    model: nn.Module,
    inputs: torch.Tensor,
    labels: torch.Tensor,
    recipe: Recipe,
    runtime: Runtime,
    generator: torch.Generator,
    *,
    val: tuple[torch.Tensor, torch.Tensor],
    stopping: Stopping,
    prepare: PrepareBatch = identity_batch,
    eval_batch_size: int = 256,
    description: str = "train",
) -> tuple[list[dict], dict]:
    """:func:`train` under the validation rule (:class:`Stopping`); leaves the best-validation weights in
    ``model`` and returns every record and the best one. Records have ``val_loss`` and ``val_acc``; with
    ``score_at_start`` the first record is step 0's (no training loss). Under the ``plateau`` schedule the
    best record also has ``decay_step``: the step its cooldown began at (None: the cap came first)."""
    best: dict = {}
    best_state: dict[str, torch.Tensor] = {}
    cooldown = Cooldown(stopping.cooldown_fraction) if recipe.schedule == "plateau" else None
    losses: list[float] = []

    def keep_best(record: dict) -> bool:
        # under torchrun, rank 0's score decides for every rank (batch-norm statistics differ per shard), so
        # that all ranks stop at the same step
        record["val_loss"] = from_rank_zero(record["val_loss"], runtime)
        record["val_acc"] = from_rank_zero(record["val_acc"], runtime)
        if not math.isfinite(record["val_loss"]):
            raise NonFiniteLossError(
                f"the validation loss became {record['val_loss']} at step {record['step']} while training went on; "
                f"the model's outputs overflow (learning rate {recipe.lr}): lower the lr in params.yaml"
            )
        if better_score(record, best):
            best.clear()
            best.update(record)
            best_state.clear()
            best_state.update({k: v.detach().clone() for k, v in model.state_dict().items()})
        if cooldown is None:
            return record["step"] - best["step"] >= stopping.patience * stopping.eval_every
        losses.append(record["val_loss"])
        window = stopping.patience
        recent, before = sum(losses[-window:]), sum(losses[-2 * window : -window])
        if cooldown.start is None and len(losses) >= 2 * window and recent >= before:
            cooldown.begin(record["step"], stopping.eval_every)
        return cooldown.over(record["step"])

    start = []
    if stopping.score_at_start:
        result = evaluate(model, *val, runtime, eval_batch_size, prepare)
        start = [{"epoch": 0, "step": 0, "val_loss": result.loss, "val_acc": result.accuracy}]
        keep_best(start[0])
    history = train(
        model, inputs, labels, recipe, runtime, generator, prepare=prepare, record_every=stopping.eval_every,
        evaluations={"val": val}, eval_batch_size=eval_batch_size, on_record=keep_best, description=description,
        cooldown=cooldown,
    )  # fmt: skip
    model.load_state_dict(best_state)
    return start + history, dict(best) | ({} if cooldown is None else {"decay_step": cooldown.start})


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
