"""Faults of checkpoint loading (pipeline/train/checkpoints.py; issue 5's case 11): a checkpoint holding a pickle
payload."""

from __future__ import annotations

import pytest
import torch
from fault_project import assert_fails
from helpers import OpensMarker


@pytest.mark.parametrize("stage", ["linear_probe", "evaluate"])
def test_poisoned_backbone_checkpoint_is_refused_and_its_code_never_runs(project, tmp_path, stage):
    backbone = project.repo / "models/backbone.pt"
    saved = backbone.read_bytes()
    marker = tmp_path / "code-ran"
    state = torch.load(backbone, weights_only=True)
    try:
        torch.save({**state, "trap": OpensMarker(marker)}, backbone)
        result = project.stage(stage)
    finally:
        backbone.write_bytes(saved)
    assert_fails(result, stage, "models/backbone.pt could not be loaded safely", "pickled code", "dvc repro")
    assert not marker.exists()
