"""pipeline.arms.scratch: the ViT from scratch's weight statistics, what the ablation reads collapse from."""

from __future__ import annotations

import pytest
import torch

from pipeline.arms.scratch import FIRST_ATTENTION, weight_rms
from pipeline.models.vit import ViT, vit_config


def test_weight_rms_is_over_every_matrix_together_and_layer_0s_attention_projection():
    torch.manual_seed(0)
    model = ViT(vit_config("tiny", num_classes=3))
    matrices = [p.detach().flatten() for p in model.parameters() if p.ndim >= 2]
    expected = torch.cat(matrices).pow(2).mean().sqrt().item()
    rms = weight_rms(model)
    assert rms["weight_rms"] == pytest.approx(expected, rel=1e-6)
    assert rms["attention0_rms"] == pytest.approx(model.get_parameter(FIRST_ATTENTION).pow(2).mean().sqrt().item())
    with torch.no_grad():  # biases and LayerNorms are not matrices: they leave it unchanged
        model.encoder.ln.weight.mul_(10)
        model.get_parameter(FIRST_ATTENTION).mul_(0.5)
    halved = weight_rms(model)
    assert halved["attention0_rms"] == pytest.approx(rms["attention0_rms"] / 2)
    assert halved["weight_rms"] < rms["weight_rms"]
