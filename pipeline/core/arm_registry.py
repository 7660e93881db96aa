"""The arms of the experiment, one module each, so that a change to one arm reruns only its stages:

- ``scratch``: the preset's ViT from random initialisation (seed 000's from-scratch model);
- ``cnn``: a small ResNet of about the same size, trained like ``scratch`` (the inductive-bias baseline);
- ``linear``: the paper's few-shot probe (closed-form ridge regression to {-1, 1}^K) on the frozen backbone;
- ``finetune``: linear probe, then fine-tune: the whole backbone trained from the probe's head;
- ``pixels``: the same few-shot probe on raw pixels, the like-for-like baseline.

:data:`REGISTRY` is the one home of what the rest of the pipeline knows about an arm: its label and colour
(every plot and table), whether it trains (an lr grid in params.yaml's ``data_hunger.<arm>``, validated by
pipeline.core.config), the prepared inputs it reads, and the dvc.yaml stage of its sweep items. The ablation's
weight-decay variants have theirs in :data:`DECAY_VARIANTS`. tests/unit/core/test_arm_registry.py checks that
dvc.yaml, params.yaml and the ``.dvc/plots/`` templates agree with both. Adding an arm means its module, its
entry here, its params section (if it trains) and its dvc.yaml item.

Each arm module has ``VIEW`` (its entry's view), ``point_data`` (a curve point's data as the arm consumes it)
and ``run_seed`` (one seed's run at one learning rate, or the probe; tested once). The trained arms
(:data:`TRAINED`) follow the validation rule (``engine.train_until_plateau``). The sweep stage imports the arm
it runs by name (:func:`arm_module`), and dvc.yaml lists that arm's module among its deps. This module imports
no torch: plots, the report and params.yaml's validation read it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType

from pipeline.core.paths import VIEWS


@dataclass(frozen=True)
class Arm:
    """One arm of the data-hunger curve: how it is named and drawn, and how the pipeline runs it."""

    label: str  # in every plot's legend and every table
    colour: str  # a matplotlib colour name, in every plot (.dvc/plots/data_hunger.json holds its hex value)
    trained: bool  # by gradient steps under the validation rule, with an lr grid (params.yaml data_hunger.<arm>)
    view: str  # the prepared inputs it reads (pipeline.core.paths.VIEWS)
    dvc_stage: str  # dvc.yaml's stage of its sweep items; its params list is what an item's MLflow run logs

    def __post_init__(self) -> None:
        if not self.label or not self.colour or not self.dvc_stage:
            raise ValueError(f"an arm needs a label, a colour and a dvc stage, got {self}")
        if self.view not in VIEWS:
            raise ValueError(f"an arm's view must be one of {VIEWS}, got {self.view!r}")


REGISTRY = {
    "scratch": Arm("ViT from scratch", "tab:red", True, "scratch", "sweep_scratch"),
    "cnn": Arm("small ResNet from scratch", "tab:orange", True, "scratch", "sweep_cnn"),
    "linear": Arm("pretrained ViT, frozen + linear head", "tab:blue", False, "pretrained", "sweep_pretrained"),
    "finetune": Arm("pretrained ViT, probe then fine-tune", "tab:green", True, "pretrained", "sweep_pretrained"),
    "pixels": Arm("few-shot probe on raw pixels", "tab:grey", False, "scratch", "sweep_pixels"),
}
ARMS = tuple(REGISTRY)  # the curve's order: metrics/data_hunger.json, plots/data_hunger.{png,csv}
TRAINED = tuple(name for name, arm in REGISTRY.items() if arm.trained)
TABLE_ORDER = ("scratch", "cnn", "pixels", "linear", "finetune")  # tables and bars: from scratch to transfer


@dataclass(frozen=True)
class DecayVariant:
    """One variant of the collapse study (the ablation stage): train_scratch's recipe with only the optimiser's
    handling of weight decay changed."""

    optimizer: str  # adam: the decay added to the gradient (L2) | adamw: decoupled from the adaptive step
    weight_decay: float | None  # None: the recipe's value
    label: str  # in the report's table
    colour: str  # in plots/ablation.png


DECAY_VARIANTS = {
    "adam_l2": DecayVariant("adam", None, "Adam, decay 0.3 added to the gradient (L2): seed 000", "tab:red"),
    "adamw": DecayVariant("adamw", None, "AdamW, decay 0.3 decoupled (the paper's)", "tab:blue"),
    "adam_no_decay": DecayVariant("adam", 0.0, "Adam, no decay", "tab:green"),
}


def arm_module(name: str) -> ModuleType:
    """``pipeline.arms.<name>``, imported on demand."""
    if name not in ARMS:
        raise ValueError(f"unknown arm {name!r}; choose one of {ARMS}")
    return importlib.import_module(f"pipeline.arms.{name}")
