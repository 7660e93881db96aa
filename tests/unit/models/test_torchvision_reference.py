"""pipeline.models.torchvision_reference: torchvision's builders, the reference the model tests compare against, build
what they
name (the parity tests themselves are in test_vit.py)."""

from __future__ import annotations

import pytest

from pipeline.models.torchvision_reference import TORCHVISION_BUILDERS, torchvision_vit, torchvision_vit_from_config
from pipeline.models.vit import ViT, vit_config
from pipeline.train.loop import count_parameters


def test_a_config_builds_torchvisions_transformer_of_the_same_sizes():
    config = vit_config("tiny", num_classes=3)
    reference = torchvision_vit_from_config(config)
    assert (reference.image_size, reference.patch_size, reference.hidden_dim) == (32, 8, 32)
    assert len(reference.encoder.layers) == config.num_layers and reference.heads.head.out_features == 3
    assert count_parameters(reference) == count_parameters(ViT(config))


def test_what_torchvision_cannot_build_is_refused_by_name():
    with pytest.raises(ValueError, match="only 3 channels and CLS pooling"):
        torchvision_vit_from_config(vit_config("fmnist", num_classes=3))  # greyscale
    with pytest.raises(ValueError, match=r"torchvision has no ViT 'B/15'; it has \["):
        torchvision_vit("B/15")
    assert set(TORCHVISION_BUILDERS) == {"B/16", "B/32", "L/16", "L/32", "H/14"}
