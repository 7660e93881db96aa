"""Stage analysis: attention plots, position similarity and the resolution change, on tiny models."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from tiny_project import CPU, SEEDS
from torch import nn

from pipeline.core import paths
from pipeline.core.params_yaml import load_params
from pipeline.data.images import ImageSet
from pipeline.results import attention_maps as attention
from pipeline.stages import analysis
from pipeline.train import checkpoints
from pipeline.train.loop import evaluate

# --- the stage -------------------------------------------------------------------------------


@pytest.mark.parametrize("project", ["offline", "paper"], indirect=True)
def test_analysis_stage_writes_plots_and_a_valid_resolution_metric(project):
    analysis.main()
    for name in ("attention.png", "position_similarity.png"):
        assert (project / "plots" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    result = json.loads((project / "metrics" / "resolution.json").read_text())
    assert result["train_size"]["size"] == 32 and result["other_size"]["size"] == 48
    for key in ("train_size", "other_size"):
        acc = result[key]["test_acc"]
        assert len(acc["per_seed"]) == len(SEEDS)
        assert all(0 <= a <= 1 and a * 12 == round(a * 12) for a in acc["per_seed"])  # correct / 12 images

    # At the training size the numbers are those of the whole model (backbone + head) on the test set.
    params = load_params()
    test_set = ImageSet.load(paths.prepared_split("pretrained", "test"))
    for seed, reported in zip(SEEDS, result["train_size"]["test_acc"]["per_seed"], strict=True):
        model = checkpoints.load_linear(params.backbone_model_name, "supervised", 3, seed, CPU)
        expected = evaluate(model, test_set.images, test_set.labels, CPU, 5, lambda x, t, g: test_set.normalise(x))
        assert reported == expected.accuracy


def test_accuracy_at_a_new_size_uses_interpolated_embeddings_on_a_copy(project):
    params = load_params()
    test_set = ImageSet.load(paths.prepared_split("pretrained", "test"))
    backbone = checkpoints.load_backbone(params.backbone_model_name, CPU, "supervised")
    before = backbone.encoder.pos_embedding.clone()
    heads = {0: nn.Linear(32, 3)}
    torch.manual_seed(3)
    heads = {0: nn.Linear(32, 3), 1: nn.Linear(32, 3)}
    result = attention.accuracy_at_size(backbone, heads, test_set, 48, CPU, 5)
    assert torch.equal(backbone.encoder.pos_embedding, before) and backbone.config.image_size == 32
    # the same numbers from whole models: an interpolated copy carrying each head, on the upsampled images
    images = test_set.normalise(attention.resize_images(test_set.images, 48))
    expected = []
    for head in heads.values():
        model = copy.deepcopy(backbone)
        model.interpolate_position_embeddings(48)
        model.heads.head = head
        with torch.no_grad():
            expected.append((model.eval()(images).argmax(1) == test_set.labels).sum().item() / len(images))
    assert result["size"] == 48 and result["test_acc"]["per_seed"] == pytest.approx(expected, abs=1e-12)
