"""pipeline.arms.synthetic_transfer: fine-tuning starts from the probe's head on any trunk, every weight trainable."""

from __future__ import annotations

import pytest
import torch

from pipeline.arms.synthetic_transfer import with_probe_head
from pipeline.pretrain.trunks import Trunk, build_backbone


@pytest.mark.parametrize("arch", ["vit", "resnet"])
def test_the_fine_tuned_model_starts_as_the_probe_on_the_frozen_trunks_features(arch):
    torch.manual_seed(0)
    backbone = build_backbone(arch, "fmnist", 1000, (4, 8, 8, 8)).eval().requires_grad_(False)
    images = torch.randn(5, 1, 28, 28)
    features = Trunk(backbone).forward_features(images)
    weight, bias = torch.randn(3, features.shape[1]), torch.randn(3)
    model = with_probe_head(backbone, weight, bias).eval()
    assert torch.allclose(model(images), features @ weight.T + bias, atol=1e-5)
    assert all(p.requires_grad for p in model.parameters())
    assert not any(p.requires_grad for p in backbone.parameters())  # the frozen backbone is left as it was
