"""Issue 38's backbones on the curve: the linear probe and fine-tuning of :mod:`pipeline.arms.linear` and
:mod:`pipeline.arms.finetune`, through any pretrained trunk (the ViT, or the small ResNet whose head is its last
linear layer) instead of the pipeline's own backbone. The protocol is the curve's: the same seeds, subsets,
validation rule and learning-rate grid (``data_hunger.finetune``), so a run pairs by seed with the curve's arms."""

from __future__ import annotations

import copy
import dataclasses

import torch
from torch import nn

from pipeline.arms import linear
from pipeline.arms.protocol import Curve, Point, fit_seed, load_point
from pipeline.core.arm_registry import REGISTRY
from pipeline.data.images import ImageSet
from pipeline.models.vit import ViT
from pipeline.pretrain.trunks import Trunk
from pipeline.train.checkpoints import finetune_model
from pipeline.train.loop import extract_features

VIEW = REGISTRY["finetune"].view
ARMS = ("linear", "finetune")


def point_data(curve: Curve, point: int, backbone: nn.Module) -> Point:
    """The point's sets with the frozen ``backbone``'s features of validation and test, computed once."""
    data = load_point(curve, VIEW, point)
    trunk = Trunk(backbone)
    runtime, batch = curve.runtime, curve.eval_batch_size
    val_features = extract_features(trunk, data.val.images, runtime, batch, data.score)
    test_features = extract_features(trunk, data.test.images, runtime, batch, data.score)
    return dataclasses.replace(data, backbone=trunk, val_features=val_features, test_features=test_features)


def with_probe_head(backbone: nn.Module, weight: torch.Tensor, bias: torch.Tensor) -> nn.Module:
    """A trainable copy of the pretrained ``backbone`` whose head is the probe's (``weight`` (K, D), ``bias``
    (K,)): the ViT's classification head, the ResNet's last linear layer."""
    if isinstance(backbone, ViT):
        model = finetune_model(backbone, len(bias))
        head = model.heads.head
    else:
        model = copy.deepcopy(backbone).requires_grad_(True)
        model[-1] = head = nn.Linear(weight.shape[1], len(bias))
    with torch.no_grad():
        head.weight.copy_(weight)
        head.bias.copy_(bias)
    return model


def run_seed(arm: str, curve: Curve, data: Point, seed: int, lr: float | None) -> dict:
    """One seed of ``arm`` (linear: the probe, ``lr`` unused; finetune: at ``lr``), as the curve's arms run it."""
    if arm == "linear":
        return linear.run_seed(curve, data, seed)
    probe, _, _ = linear.seed_probe(curve, data, seed)
    trunk = data.backbone.model

    def build(train_set: ImageSet) -> nn.Module:
        return with_probe_head(trunk, probe.weight, probe.bias)

    return fit_seed(curve, data, seed, lr, "finetune", build) | {"reg": probe.reg}
