"""The backbones of the pretraining-size axis (:mod:`pipeline.pretrain.size_axis`): our ViT or the small ResNet by
name, and
any backbone's pooled features for the few-shot probe."""

from __future__ import annotations

import torch
from torch import nn

from pipeline.data.images import ImageSet, batch_preparer
from pipeline.models.resnet import small_resnet
from pipeline.models.vit import ViT, vit_config
from pipeline.train.loop import extract_features
from pipeline.train.runtime import Runtime


def build_backbone(arch: str, model_name: str, num_classes: int, widths: tuple[int, ...]) -> nn.Module:
    """Our ViT of preset ``model_name``, or the small ResNet with ``widths`` for its images and channels."""
    if arch == "vit":
        return ViT(vit_config(model_name, num_classes=num_classes))
    return small_resnet(vit_config(model_name).in_channels, num_classes, widths)


class Trunk(nn.Module):
    """Any backbone's pooled features as ``forward_features`` (what engine.extract_features reads): the ViT's
    own (its normalised class token, or mean patch token), the ResNet's after global average pooling."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        if isinstance(self.model, ViT):
            return self.model.forward_features(x)
        return self.model[:-1](x)  # (B, C, H, W) -> (B, widths[-1]): every layer but the linear head


def features(trunk: Trunk, image_set: ImageSet, runtime: Runtime, batch_size: int) -> torch.Tensor:
    return extract_features(trunk, image_set.images, runtime, batch_size, batch_preparer(image_set, False))
