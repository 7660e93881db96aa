"""Fixtures of the fault suite: the finished paper-preset project every fault must not harm (built once per
test process, shared by every file here), a bare copy of it, and the check that a fault changed nothing."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys

import pytest
import torch
from fault_project import INJECT, Project, image_tree, zip_bytes
from helpers import digest_tree, sha
from loopback import running_server
from project_copy import clean_env, copy_project, set_params

from pipeline.core.arm_registry import ARMS
from pipeline.models.vit import ViT, vit_config


@pytest.fixture(scope="session")
def server():
    with running_server() as s:
        yield s


@pytest.fixture(scope="session")
def project(tmp_path_factory, server) -> Project:
    """The paper preset on tiny data, every stage but plot run once: the finished outputs faults must not harm."""
    root = tmp_path_factory.mktemp("faults")
    repo = root / "project"
    copy_project(repo)
    archive = zip_bytes(sorted(image_tree({"train": 4, "test": 2}).items()))
    server.routes["/good/images.zip"] = [("ok", archive)]
    torch.manual_seed(0)
    weights = io.BytesIO()
    torch.save(ViT(vit_config("tiny", num_classes=10)).state_dict(), weights)
    server.routes["/good/tiny_vit.pth"] = [("ok", weights.getvalue())]
    set_params(
        repo,
        preset="paper",
        seeds=[0],
        paper={
            "url": server.url("/good/images.zip"),
            "sha256": sha(archive),
            "model": "tiny",
            "backbone_model": "tiny",
            "weights_url": server.url("/good/tiny_vit.pth"),
            "weights_sha256": sha(weights.getvalue()),
        },
        train_scratch={"paper": {"epochs": 2, "batch_size": 4}},
        linear_probe={"paper": {"epochs": 2, "batch_size": 4}},
        validation={"paper_per_class": 1},
    )
    (root / "inject.py").write_text(INJECT)
    # evaluate reads the curve's protocol arms; these faults are about evaluate's own inputs and outputs, so a
    # stand-in curve replaces the 25 sweep items
    point = {"mean": 0.5, "std": 0.0, "per_seed": [0.5]}
    (repo / "metrics").mkdir(exist_ok=True)
    (repo / "metrics/data_hunger.json").write_text(
        json.dumps({arm: {str(n): point for n in (1, 2, 3)} for arm in ARMS})
    )
    env = clean_env()
    env["MLFLOW_TRACKING_URI"] = f"sqlite:///{root / 'mlflow.db'}"
    project = Project(repo, env, server, root / "inject.py")
    project.archive = archive
    chain = (
        "import runpy\nfor stage in {stages}:\n    runpy.run_module(f'pipeline.stages.{{stage}}', run_name='__main__')"
    )
    stages = ["download", "prepare", "backbone", "train_scratch", "linear_probe", "evaluate"]
    result = subprocess.run(  # one process for the whole chain: every start costs seconds of importing torch
        [sys.executable, "-c", chain.format(stages=stages)], cwd=repo, env=env, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    return project


@pytest.fixture
def unchanged(project):
    """Asserts, after the test, that data/raw, data/prepared and the models are exactly as before it."""
    watched = [project.repo / p for p in ("data/raw", "data/prepared", "models", "metrics")]
    before = [digest_tree(p) for p in watched]
    yield
    assert [digest_tree(p) for p in watched] == before


@pytest.fixture
def bare(tmp_path, project) -> Project:
    """A fresh project copy with nothing run yet (same params and server as ``project``)."""
    repo = tmp_path / "bare"
    copy_project(repo)
    shutil.copy(project.repo / "params.yaml", repo / "params.yaml")
    return Project(repo, project.env, project.server, project.inject)
