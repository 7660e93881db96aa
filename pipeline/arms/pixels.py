"""Arm ``pixels``: the paper's few-shot probe (:mod:`pipeline.models.probe`) on raw, normalised pixels, the
like-for-like baseline of the ``linear`` arm: the same closed-form solution and ridge rule, no backbone."""

from __future__ import annotations

import dataclasses

from pipeline.arms.protocol import Curve, Point, load_point, probe_record
from pipeline.core.arm_registry import REGISTRY
from pipeline.data.subsets import seed_subset
from pipeline.models.probe import fit_probe, flat_pixels

VIEW = REGISTRY["pixels"].view


def point_data(curve: Curve, point: int) -> Point:
    data = load_point(curve, VIEW, point)
    return dataclasses.replace(data, val_features=flat_pixels(data.val), test_features=flat_pixels(data.test))


def run_seed(curve: Curve, data: Point, seed: int, lr: float | None = None) -> dict:
    """The probe on this seed's subset; ``lr`` is unused (a closed form has none)."""
    train_set = seed_subset(data.pool, data.n, seed)
    features = flat_pixels(train_set)
    probe = fit_probe(features, train_set.labels, data.val_features, data.val.labels, data.num_classes,
                      curve.config.probe_regs)  # fmt: skip
    return probe_record(probe, (features, train_set.labels), data)
