"""Arm ``linear``: the pretrained backbone frozen, a linear head on its features. On the curve, the head is
the paper's few-shot probe (closed form, :mod:`pipeline.models.probe`); in the headline, seed 000's head trained
with Adam (the linear_probe stage). Its evaluation and curve runs (its checkpoints:
:mod:`pipeline.train.checkpoints`)."""

from __future__ import annotations

import dataclasses

import torch

from pipeline.arms.protocol import Curve, Point, for_seed, load_point, probe_record
from pipeline.core.arm_registry import REGISTRY
from pipeline.data.images import ImageSet, batch_preparer
from pipeline.data.subsets import seed_subset
from pipeline.models.probe import Probe, fit_probe
from pipeline.models.vit import ViT
from pipeline.train.checkpoints import load_backbone, load_head
from pipeline.train.loop import Evaluation, evaluate, extract_features
from pipeline.train.runtime import Runtime

VIEW = REGISTRY["linear"].view


def point_data(curve: Curve, point: int) -> Point:
    """The point's sets, with each frozen backbone's features of validation and test computed once."""
    data = load_point(curve, VIEW, point)
    runtime, batch = curve.runtime, curve.eval_batch_size
    by_backbone = []
    for index in range(curve.backbones):
        backbone = load_backbone(curve.backbone_model, runtime, curve.backbone_source, index)
        by_backbone.append((backbone, extract_features(backbone, data.val.images, runtime, batch, data.score),
                            extract_features(backbone, data.test.images, runtime, batch, data.score)))  # fmt: skip
    backbone, val_features, test_features = by_backbone[0]
    return dataclasses.replace(data, backbone=backbone, val_features=val_features, test_features=test_features,
                               by_backbone=tuple(by_backbone) if curve.backbones > 1 else ())  # fmt: skip


def seed_probe(curve: Curve, data: Point, seed: int) -> tuple[Probe, torch.Tensor, ImageSet]:
    """The few-shot probe on the frozen features of this seed's subset (through its backbone,
    :func:`protocol.for_seed`); returns it, those features and the subset. Fitted once per seed and point:
    fine-tuning's lr trials start from the same probe."""
    fitted = data.probes
    if seed not in fitted:
        fitted[seed] = fit_seed_probe(curve, for_seed(data, seed)[0], seed)
    return fitted[seed]


def fit_seed_probe(curve: Curve, data: Point, seed: int) -> tuple[Probe, torch.Tensor, ImageSet]:
    train_set = seed_subset(data.pool, data.n, seed)
    features = extract_features(data.backbone, train_set.images, curve.runtime, curve.eval_batch_size,
                                data.score)  # fmt: skip
    probe = fit_probe(features, train_set.labels, data.val_features, data.val.labels, data.num_classes,
                      curve.config.probe_regs)  # fmt: skip
    return probe, features, train_set


def run_seed(curve: Curve, data: Point, seed: int, lr: float | None = None) -> dict:
    """The probe on this seed's subset; ``lr`` is unused (a closed form has none)."""
    probe, features, train_set = seed_probe(curve, data, seed)
    seen, index = for_seed(data, seed)
    return probe_record(probe, (features, train_set.labels), seen) | ({} if index is None else {"backbone": index})


def evaluate_linear(
    backbone_model: str, source: str, seeds: list[int], test_set: ImageSet, runtime: Runtime, batch_size: int
) -> tuple[dict[int, Evaluation], ViT]:
    """Each seed's linear probe on the frozen backbone's test features; returns the results and the model
    with the last seed's head."""
    model = load_backbone(backbone_model, runtime, source)
    features = extract_features(model, test_set.images, runtime, batch_size, batch_preparer(test_set, False))
    model.reset_head(len(test_set.classes))
    results = {}
    for seed in seeds:
        head = load_head(seed, model.config.hidden_dim, len(test_set.classes))
        results[seed] = evaluate(head.to(runtime.device), features, test_set.labels, runtime, len(features))
    model.heads.head.load_state_dict(head.state_dict())
    return results, model
