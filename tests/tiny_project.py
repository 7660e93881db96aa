"""Tiny project folders: ``project``, with params.yaml, prepared test sets and trained-looking tiny models, for
the tests of the analysis stage and the predict and compare tools; ``curve_project``, the prepared splits and
backbone the data-hunger curve's arms read, for the tests of the arms and of the sweep stages."""

from __future__ import annotations

import sys

import pytest
import torch
import yaml
from helpers import raw_params
from project_copy import merged
from torch import nn

from pipeline.core import paths
from pipeline.core.files import save_tensors, write_json
from pipeline.data.images import ImageSet
from pipeline.models.vit import ViT, vit_config
from pipeline.train.checkpoints import MODEL_CARD, model_card
from pipeline.train.runtime import Runtime

CPU = Runtime(torch.device("cpu"), "fp32")
CLASSES = ["Pullover", "Coat", "Shirt"]
SEEDS = [0, 1]


def random_vit(seed: int, num_classes: int, **overrides) -> ViT:
    torch.manual_seed(seed)
    model = ViT(vit_config("tiny", num_classes=num_classes, **overrides))
    with torch.no_grad():  # the zero-initialised head would give uniform probabilities
        nn.init.normal_(model.heads.head.weight, std=0.5)
        model.encoder.pos_embedding.normal_(std=0.5)
    return model


@pytest.fixture
def project(tmp_path, monkeypatch, request):
    """A project directory with params.yaml, prepared test sets and trained-looking tiny models.

    Offline preset by default; ``indirect`` parametrisation with "paper" gives the paper preset.
    """
    preset = getattr(request, "param", "offline")
    params = {
        "preset": preset,
        "seeds": SEEDS,
        "runtime": {"device": "cpu", "precision": "fp32", "threads": 2},
        "offline": {"model": "tiny", "backbone": "supervised"},  # the fixture's backbone is models/backbone.pt
        "paper": {"model": "tiny", "backbone_model": "tiny"},
        "evaluate": {"batch_size": 5},
    }
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(merged(raw_params(), params)))
    monkeypatch.chdir(tmp_path)
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (12, 3, 32, 32), dtype=torch.uint8, generator=generator)
    labels = torch.tensor([2, 0, 1, 0, 1, 2, 0, 1, 2, 0, 1, 2])
    for view in paths.VIEWS:
        ImageSet(images, labels, CLASSES, (0.5,) * 3, (0.25,) * 3).save(paths.prepared_split(view, "test"))
    for seed in SEEDS:
        save_tensors(paths.scratch_model(seed), random_vit(seed, len(CLASSES)).state_dict())
        head = random_vit(10 + seed, len(CLASSES)).heads.head
        save_tensors(paths.linear_probe(seed), {"heads.head.weight": head.weight, "heads.head.bias": head.bias})
    save_tensors(paths.BACKBONE, random_vit(99, 5).state_dict())
    test_set = ImageSet.load(paths.prepared_split("scratch", "test"))
    config = vit_config("tiny", num_classes=len(CLASSES))
    for arm, folder in (("scratch", paths.SCRATCH_MODELS), ("linear", paths.LINEAR_PROBES)):
        card = model_card(arm, "tiny", config, test_set, "resize", SEEDS)
        write_json(folder / MODEL_CARD, card)
    return tmp_path


@pytest.fixture
def curve_project(tmp_path, monkeypatch):
    """A paper-preset prepared folder (6 train, 2 validation, 2 test images per class) and a tiny backbone."""
    monkeypatch.chdir(tmp_path)
    generator = torch.Generator().manual_seed(0)
    for view in paths.VIEWS:
        for split, per_class in (("train", 6), ("val", 2), ("test", 2)):
            labels = torch.arange(3).repeat_interleave(per_class)
            images = torch.randint(0, 80, (len(labels), 3, 32, 32), dtype=torch.uint8, generator=generator)
            images[torch.arange(len(labels)), labels] += 150  # each class its own colour
            ImageSet(images, labels, ["a", "b", "c"], (0.5,) * 3, (0.25,) * 3).save(paths.prepared_split(view, split))
    torch.manual_seed(0)
    paths.BACKBONE.parent.mkdir(parents=True)
    torch.save(ViT(vit_config("tiny", num_classes=10)).state_dict(), paths.BACKBONE)
    return tmp_path


def run_cli(module, monkeypatch, capsys, *argv: str) -> tuple[int, str, str]:
    """Runs a stage's ``main`` with ``argv``; returns the exit status, stdout and stderr."""
    monkeypatch.setattr(sys, "argv", [module.__name__, *argv])
    status = 0
    try:
        module.main()
    except SystemExit as exit_:
        status = exit_.code
    out, err = capsys.readouterr()
    return status, out, err
