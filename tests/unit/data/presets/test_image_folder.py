"""pipeline.data.presets.image_folder: the paper preset's ImageFolder through the preset interface (obtaining it
from paper.folder or the pinned zip is tested in tests/stages/test_download.py)."""

from __future__ import annotations

import torch
from helpers import params_with
from PIL import Image

from pipeline.data.images import load_split
from pipeline.data.presets import image_folder


def test_obtain_copies_your_folder_and_prepare_decodes_each_view_for_its_model(tmp_path):
    mine = tmp_path / "mine"
    for split, count in (("train", 3), ("test", 1)):
        for label, name in enumerate(("pizza", "sushi")):
            (mine / split / name).mkdir(parents=True)
            for i in range(count):
                Image.new("RGB", (40, 30), (200 * (label == 0), 10 * i, 200 * (label == 1))).save(
                    mine / split / name / f"{i}.png"
                )
    config = params_with(paper={"folder": str(mine), "model": "tiny", "backbone_model": "B/16"}).paper
    raw = tmp_path / "raw"
    assert image_folder.obtain(config, raw, tmp_path / "downloads") == raw / "images"
    assert image_folder.PRESET.view_models(config) == {"scratch": "tiny", "pretrained": "B/16"}
    out = tmp_path / "prepared"
    out.mkdir()
    result = image_folder.prepare(config, raw, out, {"scratch": (16, 3), "pretrained": (24, 3)}, 1, 10**6)
    assert result["classes"] == ["pizza", "sushi"] and result["counts"]["val"] == 2
    scratch, pretrained = load_split(out / "scratch" / "train.pt"), load_split(out / "pretrained" / "train.pt")
    assert scratch.images.shape[1:] == (3, 16, 16) and pretrained.images.shape[1:] == (3, 24, 24)
    assert torch.equal(scratch.labels, pretrained.labels)
