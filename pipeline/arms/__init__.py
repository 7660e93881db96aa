"""The arms of the experiment, one module each, so that a change to one arm reruns only its stages:

- ``scratch``: the preset's ViT from random initialisation (seed 000's from-scratch model);
- ``cnn``: a small ResNet of about the same size, trained like ``scratch`` (the inductive-bias baseline);
- ``linear``: the paper's few-shot probe (closed-form ridge regression to {-1, 1}^K) on the frozen backbone;
- ``finetune``: linear probe, then fine-tune: the whole backbone trained from the probe's head;
- ``pixels``: the same few-shot probe on raw pixels, the like-for-like baseline.

Each arm module has ``VIEW`` (which prepared inputs it reads), ``point_data`` (a curve point's data as the
arm consumes it) and ``run_seed`` (one seed's run at one learning rate, or the probe; tested once). The
trained arms (:data:`TRAINED`) follow the validation rule (``engine.train_until_plateau``). The sweep stage
imports the arm it runs by name (:func:`arm_module`), and dvc.yaml lists that arm's module among its deps.
"""

from __future__ import annotations

import importlib
from types import ModuleType

ARMS = ("scratch", "cnn", "linear", "finetune", "pixels")
TRAINED = ("scratch", "cnn", "finetune")  # trained by gradient steps under the validation rule, with an lr grid


def arm_module(name: str) -> ModuleType:
    """``pipeline.arms.<name>``, imported on demand."""
    if name not in ARMS:
        raise ValueError(f"unknown arm {name!r}; choose one of {ARMS}")
    return importlib.import_module(f"pipeline.arms.{name}")
