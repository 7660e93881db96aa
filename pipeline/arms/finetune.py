"""Arm ``finetune``: linear probe, then fine-tune (paper section 3.2 fine-tunes the whole network; starting
the head from the probe's solution keeps the first steps from wrecking the features with a random head).
The head starts as the few-shot probe of this seed's subset (``linear``'s), then every weight trains
under the validation rule."""

from __future__ import annotations

import torch

from pipeline.arms import linear
from pipeline.arms.linear import point_data  # one function: a sweep running both arms computes it once
from pipeline.arms.protocol import Curve, Point, fit_seed, for_seed
from pipeline.core.arm_registry import REGISTRY
from pipeline.data.images import ImageSet
from pipeline.models.vit import ViT
from pipeline.train.checkpoints import finetune_model

VIEW = REGISTRY["finetune"].view
__all__ = ["VIEW", "point_data", "run_seed"]


def run_seed(curve: Curve, data: Point, seed: int, lr: float) -> dict:
    """One seed at one learning rate of ``data_hunger.finetune.lrs``."""
    probe, _, _ = linear.seed_probe(curve, data, seed)
    seen, index = for_seed(data, seed)

    def build(train_set: ImageSet) -> ViT:
        model = finetune_model(seen.backbone, data.num_classes)
        with torch.no_grad():
            model.heads.head.weight.copy_(probe.weight)
            model.heads.head.bias.copy_(probe.bias)
        return model

    result = fit_seed(curve, data, seed, lr, "finetune", build)
    return {**result, "reg": probe.reg} | ({} if index is None else {"backbone": index})
