"""The arms of the experiment, one module each, so that a change to one arm reruns only its stages:

- ``scratch``: the preset's ViT from random initialisation (seed 000's from-scratch model);
- ``cnn``: a small ResNet of about the same size, trained like ``scratch`` (the inductive-bias baseline);
- ``linear``: the pretrained backbone frozen, a new linear head on features computed once;
- ``finetune``: the whole pretrained backbone trained with a new zero-initialised head.

Each arm module has ``VIEW`` (which prepared inputs it reads), ``point_data`` (a curve point's data as the
arm consumes it) and ``run_seed`` (one seeded run of the curve, tested once). The sweep stage imports the
arm it runs by name (:func:`arm_module`), and dvc.yaml lists that arm's module among the stage's deps.
"""

from __future__ import annotations

import importlib
from types import ModuleType

ARMS = ("scratch", "cnn", "linear", "finetune")
FROM_SCRATCH = ("scratch", "cnn")  # arms that train on images from random initialisation


def arm_module(name: str) -> ModuleType:
    """``pipeline.arms.<name>``, imported on demand."""
    if name not in ARMS:
        raise ValueError(f"unknown arm {name!r}; choose one of {ARMS}")
    return importlib.import_module(f"pipeline.arms.{name}")
