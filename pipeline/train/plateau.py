"""The validation rule every trained arm of the curve follows (:class:`Stopping`): score validation every few
steps, keep the best weights, and stop after a patience or, under the plateau schedule, once the cooldown ends."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch
from torch import nn

from pipeline.train.ddp import from_rank_zero
from pipeline.train.loop import NonFiniteLossError, PrepareBatch, Recording, evaluate, identity_batch, train
from pipeline.train.runtime import Runtime
from pipeline.train.schedule import Cooldown, Recipe


@dataclass(frozen=True)
class Stopping:
    """The validation rule every trained arm of the curve follows: score the validation split every
    ``eval_every`` steps (and at step 0 where ``score_at_start``), stop after ``patience`` scores without a
    better one or at the recipe's step cap, keep the weights of the best score. Better: a higher validation
    accuracy, or the same accuracy at a lower validation loss (:func:`better_score`). Under the ``plateau``
    schedule, a levelled-off validation loss (over two windows of ``window`` scores) begins the
    :class:`Cooldown` instead, and the run stops when it ends (still keeping the best-scored weights, before or
    during the decay). With ``trend="accuracy"`` the windows compare the validation accuracy instead (levelled
    off: the last window's mean no higher than the one before): the selection score, which at 10 and 25 images
    per class still rises while the loss already climbs with overconfidence (docs/results.md, "Runs that end at
    the floor")."""

    eval_every: int
    patience: int
    score_at_start: bool = False  # fine-tuning starts at the probe's solution: it may be the best it gets
    cooldown_fraction: float = 0.2  # the plateau schedule's decay, as a fraction of the steps before it
    # the plateau schedule's windows, in scores (default: patience); its cooldown begins after two at the earliest
    window: int | None = None
    trend: str = "loss"  # loss | accuracy: the validation score whose levelling off begins the plateau's cooldown


def better_score(record: dict, best: dict) -> bool:
    """The selection rule of every arm: validation accuracy first (what the test reports), the loss breaking
    ties (accuracy moves in steps of one image, 1/1,500 on the committed split, so ties happen)."""
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
    recording: Recording | None = None,
) -> tuple[list[dict], dict]:
    """:func:`train` under the validation rule (:class:`Stopping`); leaves the best-validation weights in
    ``model`` and returns every record and the best one. Records have ``val_loss`` and ``val_acc``; with
    ``score_at_start`` the first record is step 0's (no training loss). Under the ``plateau`` schedule the
    best record also has ``decay_step``: the step its cooldown began at (None: the cap came first)."""
    best: dict = {}
    best_state: dict[str, torch.Tensor] = {}
    cooldown = Cooldown(stopping.cooldown_fraction) if recipe.schedule == "plateau" else None
    # the trend's scores, oriented so that a rise is a worse score: the loss, or the accuracy negated
    trend: list[float] = []

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
        trend.append(record["val_loss"] if stopping.trend == "loss" else -record["val_acc"])
        window = stopping.window or stopping.patience
        recent, before = sum(trend[-window:]), sum(trend[-2 * window : -window])
        if cooldown.start is None and len(trend) >= 2 * window and recent >= before:
            cooldown.begin(record["step"], stopping.eval_every)
        return cooldown.over(record["step"])

    recording = recording or Recording()
    start = []
    if stopping.score_at_start:
        result = evaluate(model, *val, runtime, recording.eval_batch_size, prepare)
        start = [{"epoch": 0, "step": 0, "val_loss": result.loss, "val_acc": result.accuracy}]
        keep_best(start[0])
    scored = dataclasses.replace(recording, every=stopping.eval_every, evaluations={"val": val}, on_record=keep_best)
    history = train(model, inputs, labels, recipe, runtime, generator, prepare=prepare, recording=scored,
                    cooldown=cooldown)  # fmt: skip
    model.load_state_dict(best_state)
    return start + history, dict(best) | ({} if cooldown is None else {"decay_step": cooldown.start})
