"""Issue 38's opt-in study end to end: `dvc repro studies/synthetic/dvc.yaml` on the tiny offline fixture, through
real DVC (which first runs the default stages the study reads) and a real MLflow store; then nothing left to run;
then `make synthetic` on a new machine (no cache, no models) runs the study's stages alone and leaves the default
pipeline's results be; and the default `dvc repro` plan never holds a study stage."""

from __future__ import annotations

import json
import shutil
import sqlite3
import sys
from pathlib import Path

import pytest
from project_copy import set_params
from tiny_offline import run_checked, tiny_project

pytestmark = [pytest.mark.e2e, pytest.mark.study]  # make test-studies and CI: minutes, not in make test

REPO = Path(__file__).resolve().parents[2]
ARCHES, POINTS = ("vit", "resnet"), (0, 1, 2)
TINY = {"categories": 4, "per_category": [1, 2, 4], "held_out_per_category": 2, "steps": 4, "scores": 2,
        "primary_shots": 2, "min_held_out_acc": 0.0}  # fmt: skip


def test_the_synthetic_study_runs_end_to_end_through_dvc_and_tests_its_hypotheses(tmp_path):
    repo = tmp_path / "project"
    repo.mkdir()
    env = tiny_project(repo)
    shutil.copytree(REPO / "studies", repo / "studies")
    set_params(repo, synthetic=TINY)
    output = run_checked(["dvc", "repro", "studies/synthetic/dvc.yaml"], repo, env, timeout=1200)
    items = [f"synthetic_{kind}@{a}-{p}" for kind in ("pretrain", "finetune") for a in ARCHES for p in POINTS]
    for stage in ("synthetic_data", "synthetic_scale", *items):
        assert f"Running stage 'studies/synthetic/dvc.yaml:{stage}'" in output
    assert "Running stage 'sweep_scratch@0'" not in output  # the default stages it does not read stay unrun

    images = json.loads((repo / "metrics/synthetic/images.json").read_text())
    assert (images["synthetic"]["categories"], images["synthetic"]["instances"]) == (4, 4 + 2)
    assert 0 < images["synthetic"]["mean"] < 1 and images["fashion_mnist"]["images"] == 56
    for arch in ARCHES:
        sizes = []
        for point in POINTS:
            item = json.loads((repo / f"metrics/synthetic/pretrain_{arch}_{point}.json").read_text())
            sizes.append(item["n_pretrain"])
            assert [r["step"] for r in item["held_out"]] == [2, 4] and item["used"]
            assert item["held_out_acc"] == max(r["held_out_acc"] for r in item["held_out"])
            assert set(item["few_shot"]) == {"1", "2"}
            tuned = json.loads((repo / f"metrics/synthetic/finetune_{arch}_{point}.json").read_text())
            assert set(tuned["linear"]) == set(tuned["finetune"]) == {"1", "2"}  # data_hunger's first and headline
            assert tuned["finetune"]["2"]["runs"]["0"]["lr"] == 0.0001
        assert sizes == [4, 8, 16]  # 4 categories x 1, 2, 4 instances
    metrics = json.loads((repo / "metrics/synthetic.json").read_text())
    for name, hypothesis in metrics["hypotheses"].items():
        difference = hypothesis["difference"]
        assert hypothesis["met"] == (difference["low"] > 0), name
        assert set(difference) >= {"mean", "low", "high", "per_seed"}
    assert set(metrics["slopes"]["vit-resnet"]) == {"1", "2"}
    assert (repo / "plots/synthetic_scale.png").read_bytes()[:4] == b"\x89PNG"
    assert (repo / "plots/synthetic_examples.png").read_bytes()[:4] == b"\x89PNG"
    rows = (repo / "plots/synthetic_scale.csv").read_text().splitlines()
    assert len(rows) == 1 + 2 * 3 * 2 + 2 * 2 * 2  # synthetic: 2 arches x 3 sizes x 2 shots; Fashion-MNIST: 2 x 2 x 2

    with sqlite3.connect(repo / "mlflow.db") as db:
        names = {row[0] for row in db.execute("select name from runs")}
    assert {f"synthetic-{a}-{n}-seed0" for a in ARCHES for n in (4, 8, 16)} <= names
    assert "synthetic-vit-16-finetune-2" in names

    again = run_checked(["dvc", "repro", "studies/synthetic/dvc.yaml"], repo, env)
    assert "Running stage" not in again

    # A new machine with the committed results: no DVC cache, models or prepared data. `make synthetic` runs the
    # study's stages alone, never a default stage upstream of the results it reads, and leaves those results be.
    default_results = [path for path in (repo / "metrics").rglob("*.json") if "synthetic" not in path.name
                       and "synthetic" not in path.parent.name]  # fmt: skip
    committed = {path: path.read_bytes() for path in default_results}
    for folder in (".dvc/cache", "models", "data/prepared", "data/synthetic"):
        shutil.rmtree(repo / folder)
    shutil.copy(REPO / "Makefile", repo / "Makefile")
    venv = Path(sys.executable).parent.parent
    made = run_checked(["make", "-o", "install", "-o", "data", "synthetic", f"VENV={venv}"], repo, env, timeout=1200)
    assert "Running stage 'prepare'" in made and "Running stage 'backbone'" not in made and "pretrain_scale" not in made
    assert "Running stage 'studies/synthetic/dvc.yaml:synthetic_pretrain@resnet-2'" in made
    assert {path: path.read_bytes() for path in committed} == committed
    dag = run_checked(["dvc", "dag", "--dot", "dvc.yaml"], repo, env)
    assert "synthetic" not in dag  # the default pipeline's graph holds no study stage
