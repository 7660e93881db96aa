"""Arm ``finetune``: the whole pretrained backbone trained with a new zero-initialised head, as the paper
fine-tunes (section 3.2)."""

from __future__ import annotations

import dataclasses

from pipeline.arms.common import Curve, curve_recipe, load_point, seeded_run
from pipeline.model import ViT
from pipeline.pretraining import load_backbone

VIEW = "pretrained"


def point_data(curve: Curve, point: int) -> dict:
    data = load_point(curve, VIEW, point)
    data["backbone"] = load_backbone(curve.backbone_model, curve.runtime)
    return data


def run_seed(curve: Curve, data: dict, seed: int) -> tuple[dict, float, float, int]:
    """One curve run: ``data_hunger.finetune``'s optimiser (the paper's recipe) for the fixed step budget."""
    recipe = curve_recipe(curve.config, "finetune")

    def build() -> ViT:
        return finetune_model(data["backbone"], data["num_classes"])

    return seeded_run(curve, data, seed, recipe, build, f"finetune seed {seed}")


def finetune_model(backbone: ViT, num_classes: int) -> ViT:
    """A trainable copy of the pretrained backbone with a new zero-initialised head (paper, section 3.2)."""
    config = dataclasses.replace(backbone.config, num_classes=num_classes)
    model = ViT(config)
    state = {k: v for k, v in backbone.state_dict().items() if not k.startswith("heads.")}
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or set(missing) != {"heads.head.weight", "heads.head.bias"}:
        raise RuntimeError(f"backbone and model differ beyond the head: missing {missing}, unexpected {unexpected}")
    return model
