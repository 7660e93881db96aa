"""The optimiser recipes params.yaml's sections share: an optimiser's settings, with epochs and a batch size
(the backbone, seed 000's arms, masked patch prediction) or with a grid of learning rates (the curve's trained
arms, one chosen per size on validation)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from pipeline.core.errors import require


@dataclass(frozen=True)
class Optimiser:
    """How the weights move, shared by every section that trains (engine.Recipe adds batch size and steps).

    ``adam`` adds ``weight_decay`` to the gradient (L2, as seed 000's ``torch.optim.Adam``); ``adamw``
    decouples it from the adaptive step (the paper's optimiser).
    """

    optimizer: Literal["adam", "adamw"]
    lr: float
    weight_decay: float
    schedule: Literal["none", "cosine"]  # cosine decays to 0 after the linear warmup
    warmup_fraction: float  # share of the steps with linear warmup
    grad_clip: float  # max global gradient norm; 0 disables clipping

    def validate(self, key: str) -> None:
        require(0 < self.lr < math.inf, f"{key}.lr", f"must be positive and finite, got {self.lr}")
        for name in ("weight_decay", "grad_clip"):
            require(0 <= getattr(self, name) < math.inf, f"{key}.{name}", "must not be negative, and finite")
        require(0 <= self.warmup_fraction < 1, f"{key}.warmup_fraction", "must be in [0, 1)")


@dataclass(frozen=True)
class EpochRecipe(Optimiser):
    """An optimiser with a batch size and a number of passes over the training set."""

    batch_size: int
    epochs: int

    def validate(self, key: str) -> None:
        super().validate(key)
        require(self.batch_size >= 1, f"{key}.batch_size", f"must be at least 1, got {self.batch_size}")
        require(self.epochs >= 1, f"{key}.epochs", f"must be at least 1, got {self.epochs}")


@dataclass(frozen=True)
class BackboneConfig(EpochRecipe):
    augment: bool  # random crop (pad 2) and horizontal flip
    seed: int


@dataclass(frozen=True)
class ScratchRecipe(EpochRecipe):
    """One preset's from-scratch recipe (seed 000's: Adam, lr 3e-3, weight decay 0.3, batch 32)."""

    augment: bool
    dropout: float  # after the position embeddings and after each dense layer of the MLP (Table 3)

    def validate(self, key: str) -> None:
        super().validate(key)
        require(0 <= self.dropout < 1, f"{key}.dropout", f"must be in [0, 1), got {self.dropout}")


@dataclass(frozen=True)
class GridOptimiser:
    """An arm's optimiser with a grid of learning rates, written before any run; the sweep picks one per size on
    the validation split (the best mean validation score over ``data_hunger.choice_seeds`` seeds,
    ``plateau.better_score`` within each run)."""

    optimizer: Literal["adam", "adamw"]
    lrs: list[float]
    weight_decay: float
    # after the linear warmup: cosine decays to 0 at the end of the budget; plateau stays constant until the
    # validation score levels off, then decays to 0 over data_hunger.cooldown_fraction of the steps so far
    schedule: Literal["none", "cosine", "plateau"]
    warmup_fraction: float  # share of the budget with linear warmup
    grad_clip: float  # max global gradient norm; 0 disables clipping

    def validate(self, key: str) -> None:
        require(len(self.lrs) >= 1 and all(0 < lr < math.inf for lr in self.lrs), f"{key}.lrs",
                f"must list positive, finite learning rates, got {self.lrs}")  # fmt: skip
        require(len(set(self.lrs)) == len(self.lrs), f"{key}.lrs", f"must not repeat, got {self.lrs}")
        require(self.lrs == sorted(self.lrs), f"{key}.lrs",
                f"must be in increasing order (a choice at either end is flagged), got {self.lrs}")  # fmt: skip
        for name in ("weight_decay", "grad_clip"):
            require(0 <= getattr(self, name) < math.inf, f"{key}.{name}", "must not be negative, and finite")
        require(0 <= self.warmup_fraction < 1, f"{key}.warmup_fraction", "must be in [0, 1)")

    def at(self, lr: float) -> Optimiser:
        """This optimiser at one learning rate of the grid."""
        return Optimiser(self.optimizer, lr, self.weight_decay, self.schedule, self.warmup_fraction, self.grad_clip)
