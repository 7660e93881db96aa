"""Arm ``cnn``: the small ResNet (:mod:`pipeline.models.resnet`), the inductive-bias baseline of the data-hunger
curve (seed 003, exercise 5), trained with the from-scratch ViT's grid and validation rule."""

from __future__ import annotations

from torch import nn

from pipeline.arms.protocol import Curve, Point, fit_seed, load_point
from pipeline.core.arm_registry import REGISTRY
from pipeline.data.images import ImageSet
from pipeline.models.resnet import small_resnet

VIEW = REGISTRY["cnn"].view


def point_data(curve: Curve, point: int) -> Point:
    return load_point(curve, VIEW, point)


def run_seed(curve: Curve, data: Point, seed: int, lr: float) -> dict:
    """One seed at one learning rate of ``data_hunger.cnn.lrs`` (the same grid and rule as the ViT's)."""

    def build(train_set: ImageSet) -> nn.Sequential:
        return small_resnet(train_set.images.shape[1], data.num_classes, tuple(curve.config.cnn_widths))

    return fit_seed(curve, data, seed, lr, "cnn", build)
