"""The paper preset's backbone stage on torchvision's own checkpoint layout, served on loopback.

torchvision's published ViT checkpoints predate its rename of the MLP layers (``mlp.linear_1`` /
``mlp.linear_2``); the stage must load them as torchvision does and give torchvision's logits.
"""

from __future__ import annotations

import hashlib
import io
import subprocess
import sys

import pytest
import torch
from helpers import assert_close_fp32
from loopback import running_server
from project_copy import clean_env, copy_project, set_params

from pipeline.core.files import load_tensors
from pipeline.models.torchvision_reference import torchvision_vit
from pipeline.models.vit import ViT, vit_config


def legacy_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """torchvision's state dict as its checkpoint files hold it: mlp.0/mlp.3 under their old names."""
    renamed = {}
    for key, value in state.items():
        renamed[key.replace(".mlp.0.", ".mlp.linear_1.").replace(".mlp.3.", ".mlp.linear_2.")] = value
    return renamed


@pytest.fixture(scope="module")
def reference() -> torch.nn.Module:
    torch.manual_seed(0)
    model = torchvision_vit("B/16").eval()
    with torch.no_grad():
        model.heads.head.weight.normal_(std=0.02)  # zero at initialisation: the logits would match vacuously
    return model


def backbone_stage(tmp_path, state: dict, model_name: str = "B/16") -> tuple[subprocess.CompletedProcess, object]:
    weights = io.BytesIO()
    torch.save(state, weights)
    repo = tmp_path / "project"
    repo.mkdir()
    copy_project(repo)
    with running_server() as server:
        server.routes["/vit_b_16-legacy.pth"] = [("ok", weights.getvalue())]
        set_params(
            repo,
            preset="paper",
            paper={
                "backbone_model": model_name,
                "weights_url": server.url("/vit_b_16-legacy.pth"),
                "weights_sha256": hashlib.sha256(weights.getvalue()).hexdigest(),
            },
        )
        result = subprocess.run(
            [sys.executable, "-m", "pipeline.stages.backbone"],
            cwd=repo,
            env=clean_env(),
            capture_output=True,
            text=True,
        )
    return result, repo


def test_torchvision_legacy_mlp_names_load_through_the_backbone_stage_with_logit_parity(tmp_path, reference):
    legacy = legacy_names(reference.state_dict())
    assert any(".mlp.linear_1." in key for key in legacy)
    result, repo = backbone_stage(tmp_path, legacy)
    assert result.returncode == 0, result.stderr[-2000:]
    ours = ViT(vit_config("B/16"))
    ours.load_state_dict(load_tensors(repo / "models/backbone.pt"), strict=True)
    ours.eval()
    x = torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        ours_logits, reference_logits = ours(x), reference(x)
    difference = (ours_logits - reference_logits).abs().max().item()
    print(f"\nlegacy-named B/16 through the stage: max |logit difference| {difference:.2e}")
    assert difference < 1e-5
    assert_close_fp32(ours_logits, reference_logits, terms=768)


def test_weights_that_do_not_fit_name_the_first_mismatching_keys_and_suggest_no_guess(tmp_path, reference):
    state = legacy_names(reference.state_dict())
    del state["encoder.layers.encoder_layer_11.ln_2.weight"]
    state["encoder.extra.weight"] = torch.zeros(1)
    result, _ = backbone_stage(tmp_path, state)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert "1 missing: encoder.layers.encoder_layer_11.ln_2.weight" in lines[0]
    assert "1 unexpected: encoder.extra.weight" in lines[0]
    assert "set paper.backbone_model to" not in lines[0]
    assert "paper.weights_url and paper.backbone_model" in lines[0]
