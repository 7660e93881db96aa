"""pipeline.core.paths: every stage's files sit where dvc.yaml declares them, so DVC tracks what the stages write."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from helpers import ROOT

from pipeline.core import paths

STAGES = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]


def outs(stage: str) -> set[str]:
    return {next(iter(out)) if isinstance(out, dict) else out for out in STAGES[stage]["outs"]}


def test_per_seed_and_per_view_files_are_named_inside_their_folders():
    assert paths.prepared_split("pretrained", "val") == Path("data/prepared/pretrained/val.pt")
    assert paths.scratch_model(3) == Path("models/scratch/seed_3.pt")
    assert paths.linear_probe(3) == Path("models/linear_probe/head_seed_3.pt")
    assert paths.scratch_model(3) != paths.scratch_model(4)


@pytest.mark.parametrize(
    ("stage", "path"),
    [
        ("prepare", paths.PREPARED),
        ("backbone", paths.BACKBONE),
        ("train_scratch", paths.SCRATCH_MODELS),
        ("linear_probe", paths.LINEAR_PROBES),
        ("masked_patch", paths.MASKED_PATCH),
    ],
)
def test_each_stage_writes_under_one_of_its_dvc_outs(stage, path):
    assert any(path == Path(out) or Path(out) in path.parents for out in outs(stage)), (path, outs(stage))


def test_every_backbone_choice_is_a_file_under_models():
    assert set(paths.BACKBONES.values()) == {paths.BACKBONE, paths.MASKED_PATCH}
    assert all(path.parent == paths.MODELS and path.suffix == ".pt" for path in paths.BACKBONES.values())
