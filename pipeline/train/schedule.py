"""A run's recipe and its learning-rate schedule: steps from epochs, warmup, cosine decay, and the plateau
schedule's cooldown, begun by the validation rule (:mod:`pipeline.train.plateau`)."""

from __future__ import annotations

import math
from dataclasses import dataclass


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


def epoch_steps(epochs: int, n: int, batch_size: int) -> int:
    """Optimiser steps in ``epochs`` passes over ``n`` examples (each epoch's last batch may be short)."""
    return epochs * math.ceil(n / batch_size)


def epoch_recipe(optimiser, n: int, batch_size: int, epochs: int | None = None) -> tuple[Recipe, int]:
    """The one binding from epochs to steps: the recipe of ``epochs`` (default ``optimiser.epochs``) passes over
    ``n`` examples, and the steps of one epoch (every stage records once per epoch)."""
    steps_per_epoch = epoch_steps(1, n, batch_size)
    epochs = optimiser.epochs if epochs is None else epochs
    return Recipe.of(optimiser, batch_size, epochs * steps_per_epoch), steps_per_epoch


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
    length). The rate stays constant until the validation score has levelled off: its mean over the last
    ``Stopping.window`` scores is no better than over the ``window`` scores before them (the loss or, under
    ``Stopping.trend="accuracy"``, the accuracy: a trend, which one lucky score at a constant rate does not set
    off, as a best-so-far rule is); it then falls linearly to 0 over
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
