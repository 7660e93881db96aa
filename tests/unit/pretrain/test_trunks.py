"""pipeline.pretrain.trunks: the pretraining-size axis's backbones by name, and their pooled features."""

from __future__ import annotations

import torch
from helpers import CPU

from pipeline.data.images import ImageSet
from pipeline.models.vit import ViT
from pipeline.pretrain.trunks import Trunk, build_backbone, features
from pipeline.train.loop import count_parameters


def test_build_backbone_gives_the_vit_or_a_resnet_for_the_presets_channels():
    vit = build_backbone("vit", "tiny", 7, (4, 8))
    assert isinstance(vit, ViT) and vit.heads.head.out_features == 7
    resnet = build_backbone("resnet", "fmnist", 7, (4, 8))  # fmnist: greyscale
    assert resnet(torch.zeros(2, 1, 28, 28)).shape == (2, 7)
    assert count_parameters(build_backbone("resnet", "fmnist", 7, (4, 16))) > count_parameters(resnet)


def test_features_are_the_vits_own_and_the_resnets_pooled_output_before_its_head():
    torch.manual_seed(0)
    images = torch.randn(3, 3, 32, 32)
    vit = build_backbone("vit", "tiny", 5, (4, 8)).eval()
    assert torch.equal(Trunk(vit).forward_features(images), vit.forward_features(images))
    resnet = build_backbone("resnet", "tiny", 5, (4, 8)).eval()
    pooled = Trunk(resnet).forward_features(images)
    assert pooled.shape == (3, 8)  # widths[-1]
    torch.testing.assert_close(resnet[-1](pooled), resnet(images))  # the head applied to them gives the logits


def test_features_of_an_image_set_are_taken_unaugmented_and_normalised():
    images = torch.randint(0, 256, (4, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    image_set = ImageSet(images, torch.tensor([0, 1, 2, 0]), ["a", "b", "c"], (0.5,) * 3, (0.25,) * 3)
    trunk = Trunk(build_backbone("vit", "tiny", 3, (4, 8)).eval())
    expected = trunk.forward_features(image_set.normalise(images))
    torch.testing.assert_close(features(trunk, image_set, CPU, batch_size=3), expected)
