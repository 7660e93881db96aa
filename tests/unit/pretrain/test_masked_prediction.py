"""Masked patch prediction (paper section 4.6): the targets are each patch's mean intensity in 2^bits levels,
half the patches are corrupted 80/10/10, and the loss reaches the mask token, the head and the ViT."""

from __future__ import annotations

import torch

from pipeline.models.vit import ViT, vit_config
from pipeline.pretrain.masked_prediction import MaskedPatchModel


def model(bits: int = 3) -> MaskedPatchModel:
    torch.manual_seed(0)
    return MaskedPatchModel(ViT(vit_config("tiny", num_classes=3, pool="mean")), bits)


def test_targets_are_each_patchs_mean_colour_in_eight_levels_per_channel():
    pixels = torch.zeros(1, 3, 32, 32, dtype=torch.uint8)  # tiny: 8x8 patches, a 4x4 grid
    pixels[0, 0, :8, :8] = 255  # patch 0: red at the top level 7
    pixels[0, 1, :8, 8:16] = 100  # patch 1: green 100/255 = 0.39 -> level 3
    pixels[0, 2, 8:16, :8] = 32  # patch 4: blue 32/255 = 0.125 -> level 1
    targets = model().targets(pixels)
    assert targets.shape == (1, 16)
    assert targets[0, :5].tolist() == [7, 3 * 8, 0, 0, 1 * 64]  # channel c is digit c in base 8
    assert model(bits=1).targets(pixels)[0, :2].tolist() == [1, 0]  # 2 levels: 100/255 is the lower half


def test_half_the_patches_are_corrupted_mostly_by_the_mask_token_and_the_rest_kept():
    m = model()
    patches = torch.randn(64, 16, 32)
    out, corrupted = m.corrupt(patches, 0.5, torch.Generator().manual_seed(0))
    assert corrupted.sum(dim=1).tolist() == [8] * 64  # exactly half of each image's 16 patches
    assert torch.equal(out[~corrupted], patches[~corrupted])  # the others untouched
    masked = (out == m.mask_token.detach()).all(dim=-1)
    kept = (out == patches).all(dim=-1) & corrupted
    replaced = corrupted & ~masked & ~kept
    share = [x.sum().item() / corrupted.sum().item() for x in (masked, replaced, kept)]
    assert abs(share[0] - 0.8) < 0.05 and abs(share[1] - 0.1) < 0.04 and abs(share[2] - 0.1) < 0.04
    assert not masked[~corrupted].any()


def test_the_loss_trains_every_parameter_but_the_unused_class_head():
    m = model()
    pixels = torch.randint(0, 256, (4, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    loss, right, count = m.loss(pixels.float() / 255, pixels, 0.5, torch.Generator().manual_seed(2))
    assert count == 4 * 8 and 0 <= right <= count
    loss.backward()
    missing = {name for name, p in m.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0}
    assert missing == {"vit.heads.head.weight", "vit.heads.head.bias"}  # features come from the patch tokens


def test_the_arms_load_the_masked_patch_backbone_with_its_mean_patch_token(tmp_path, monkeypatch):
    import pytest
    from helpers import CPU

    from pipeline.core import paths
    from pipeline.core.errors import UserError
    from pipeline.core.files import save_tensors
    from pipeline.train.checkpoints import load_backbone

    monkeypatch.chdir(tmp_path)
    vit = model().vit
    save_tensors(paths.MASKED_PATCH, vit.state_dict())
    loaded = load_backbone("tiny", CPU, "masked_patch")
    assert loaded.config.pool == "mean" and not any(p.requires_grad for p in loaded.parameters())
    images = torch.rand(2, 3, 32, 32)
    z, _ = vit.encoder(vit.embed(images))
    torch.testing.assert_close(loaded.forward_features(images), z[:, 1:].mean(dim=1))
    save_tensors(paths.MASKED_PATCH, {})  # what the stage writes for the paper preset
    with pytest.raises(UserError, match="holds no weights .* set offline.backbone: supervised"):
        load_backbone("tiny", CPU, "masked_patch")


def test_the_stage_stops_on_a_variant_it_does_not_have_with_its_usage_in_one_line():
    import subprocess
    import sys
    from pathlib import Path

    from fault_project import assert_fails
    from project_copy import clean_env

    repo = Path(__file__).resolve().parents[3]
    result = subprocess.run([sys.executable, "-m", "pipeline.stages.masked_patch", "longer"], cwd=repo,
                            env=clean_env(), capture_output=True, text=True, timeout=120)  # fmt: skip
    assert_fails(result, "masked_patch", "usage: python -m pipeline.stages.masked_patch [pool|long]", "['longer']")
