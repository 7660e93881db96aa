"""The offline preset's stages, prepare to plot, on small IDX files written here (no Debian package needed).

In a file of its own so that `pytest -n 2 --dist loadfile` runs it beside the paper preset's `dvc repro`.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import idx_bytes
from project_copy import clean_env, copy_project, set_params


def run(args: list[str], cwd: Path, env: dict[str, str]) -> str:
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, f"{' '.join(args)} failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    return result.stdout + result.stderr


def test_offline_preset_runs_on_a_small_idx_fixture(tmp_path):
    """prepare -> plot on IDX files written here (download is covered by tests/unit/data/test_fetch.py)."""
    repo = tmp_path / "project"
    repo.mkdir()
    copy_project(repo)
    set_params(
        repo,
        seeds=[0],
        offline={"classes": ["Trouser", "Sandal", "Bag"], "train_per_class": 4},
        validation={"offline_per_class": 2},
        backbone={"epochs": 1, "batch_size": 16},
        pretraining_scale={"points": [0, 1], "pool_per_class": [2, 8], "shots": [1, 2]},
        masked_patch={"epochs": 1, "batch_size": 16, "decision_shots": 1, "stretch_epochs": 2, "stretch_shots": 2},
        synthetic={"primary_shots": 2},
        train_scratch={"offline": {"epochs": 1, "batch_size": 8}},
        linear_probe={"offline": {"epochs": 1, "batch_size": 8}},
        data_hunger={
            "offline_sizes": [1, 2, 3, 4, 6],
            "max_epochs": 1,
            "min_steps": 2,
            "scores": 2,
            "patience": 1,
            "plateau_window": 1,
            "batch_size": 4,
            "cnn": {"lrs": [0.001]},
            "finetune": {"lrs": [0.0001]},
        },  # fmt: skip
    )
    rng = np.random.default_rng(0)
    raw = repo / "data/raw/fashion-mnist"
    raw.mkdir(parents=True)
    for prefix, per_class in (("train", 8), ("t10k", 3)):
        labels = np.repeat(np.arange(10, dtype=np.uint8), per_class)
        images = rng.integers(0, 256, size=(len(labels), 28, 28), dtype=np.uint8)
        (raw / f"{prefix}-images-idx3-ubyte").write_bytes(gzip.compress(idx_bytes(images)))
        (raw / f"{prefix}-labels-idx1-ubyte").write_bytes(idx_bytes(labels))
    env = clean_env()
    env["MLFLOW_TRACKING_URI"] = f"sqlite:///{tmp_path / 'mlflow.db'}"
    # the stages whose offline path differs from the paper preset's (the others run the same code on either
    # preset: tests/stages/test_e2e.py runs them)
    for stage in ("prepare", "backbone", "masked_patch", "train_scratch"):  # masked_patch: the arms' backbone
        run([sys.executable, "-m", f"pipeline.stages.{stage}"], repo, env)
    for arm, point in (("cnn", "1"), ("finetune", "4")):
        run([sys.executable, "-m", "pipeline.stages.sweep", arm, point], repo, env)
    info = json.loads((repo / "data/prepared/info.json").read_text())
    assert info["counts"] == {"val": 6, "test": 9, "pool_train": 56, "pool_test": 21, "train_all": 18}
    point = json.loads((repo / "metrics/data_hunger/finetune_4.json").read_text())
    assert (point["n_train_per_class"], point["n_train"], point["n_val"], point["n_test"]) == (6, 18, 6, 9)
    cnn_point = json.loads((repo / "metrics/data_hunger/cnn_1.json").read_text())
    assert (cnn_point["n_train"], cnn_point["trained_parameters"]) == (6, 1_226_595)  # grey 28x28, 3 classes
    assert "Trouser" not in info["pool_classes"] and len(info["pool_classes"]) == 7
    backbone = json.loads((repo / "metrics/backbone.json").read_text())
    assert backbone["source"] == "pretrain" and backbone["n_pretrain"] == 56
    assert info["classes"] == ["Trouser", "Sandal", "Bag"]
    card = json.loads((repo / "models/scratch/model.json").read_text())  # grey 28x28, Fashion-MNIST's statistics
    assert (card["model"]["image_size"], card["model"]["in_channels"], card["mean"], card["std"]) == (
        28,
        1,
        [0.286],
        [0.353],
    )
    # the pretraining-size axis and the masked-patch pilot (issue 12), in one process: imports cost seconds each
    chain = (
        "import runpy, sys\n"
        "for argv in [['pretrain_scale', 'vit', '0'], ['pretrain_scale', 'vit', '1'],"
        " ['pretrain_scale', 'resnet', '0'], ['pretrain_scale', 'resnet', '1'], ['masked_patch', 'pool'],"
        " ['masked_patch', 'long'], ['pretraining_scale']]:\n"
        "    sys.argv = argv\n"
        "    runpy.run_module(f'pipeline.stages.{argv[0]}', run_name='__main__')\n"
    )
    run([sys.executable, "-c", chain], repo, env)
    scale = json.loads((repo / "metrics/pretraining_scale.json").read_text())
    assert set(scale["vit"]) == set(scale["resnet"]) == {"14", "56"}  # 2 and 8 images of each of 7 pool classes
    # every unlabeled training image but validation's (the default), and the pool's alone (its twin)
    assert set(scale["vit_masked_patch"]) == {str(56 + 18), "56"}
    assert scale["vit_masked_patch_sizes"] == {"all": 56 + 18, "pool": 56}
    pool_only = json.loads((repo / "metrics/pretraining_scale/vit_masked_patch_pool.json").read_text())
    assert pool_only["images"] == "pool" and pool_only["few_shot"] == scale["vit_masked_patch"]["56"]
    gain = scale["comparisons"]["vit_masked_patch-vit_masked_patch_pool"]
    assert set(gain) == {"74/1", "74/2"}
    default, twin = scale["vit_masked_patch"]["74"]["2"]["per_seed"], pool_only["few_shot"]["2"]["per_seed"]
    assert gain["74/2"]["per_seed"] == pytest.approx([a - b for a, b in zip(default, twin, strict=True)])
    # the pre-registered stretch: the default's images for stretch_epochs, against pixels at stretch_shots
    longer = json.loads((repo / "metrics/pretraining_scale/vit_masked_patch_long.json").read_text())
    assert (longer["epochs"], longer["n_pretrain"], len(longer["history"])) == (2, 74, 2)
    assert scale["vit_masked_patch_long"] == {"74": longer["few_shot"]} and scale["vit_masked_patch_long_epochs"] == 2
    stretch, comparisons = scale["stretch"], scale["comparisons"]
    assert stretch["shots"] == 2 and stretch["difference"] == comparisons["vit_masked_patch_long-pixels"]["74/2"]
    assert stretch["success"] == (stretch["difference"]["low"] > 0)
    assert set(comparisons["vit_masked_patch_long-vit_masked_patch"]) == {"74/1", "74/2"}
    for arch in ("vit", "resnet", "vit_masked_patch", "vit_masked_patch_long"):
        for by_shots in scale[arch].values():
            assert set(by_shots) == {"1", "2"}
            assert all(
                set(v) == {"mean", "std", "per_seed", "val"} and len(v["per_seed"]) == 1 for v in by_shots.values()
            )
            assert all(a * 9 == round(a * 9) for v in by_shots.values() for a in v["per_seed"])  # out of 9 images
    assert set(scale["pixels"]) == {"1", "2"}
    # the whole pool's ViT is the backbone stage's model, read rather than retrained
    assert scale["pool_test_acc"]["vit"]["56"] == backbone["pool_test_acc"]
    decision = scale["decision"]
    assert decision["go"] == (decision["masked_patch_val"] > decision["supervised_val"])
    assert decision["supervised_val"] == scale["vit"]["56"]["1"]["val"]["mean"]  # decision_shots 1 here
    assert decision["masked_patch_val"] == scale["vit_masked_patch"]["74"]["1"]["val"]["mean"]
    rows = (repo / "plots/pretraining_scale.csv").read_text().splitlines()
    assert rows[0] == "arch,n_pretrain,shots,test_acc,test_acc_std" and len(rows) == 1 + (2 + 2 + 2 + 1 + 2) * 2
    assert (repo / "plots/pretraining_scale.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # issue 37's backbone variance: a second masked-patch seed; on the curve, seed 1 probes and fine-tunes
    # through it (backbone 1 mod 2), seed 0 through the masked_patch stage's
    set_params(repo, seeds=[0, 1], masked_patch={"extra_seeds": [1]})
    run([sys.executable, "-m", "pipeline.stages.masked_patch_seeds"], repo, env)
    seeded = json.loads((repo / "metrics/pretraining_scale/vit_masked_patch_seeds.json").read_text())
    assert seeded["seeds"] == [0, 1] and set(seeded["extra"]) == {"1"} and seeded["extra"]["1"]["n_pretrain"] == 74
    assert sorted(p.name for p in (repo / "models/masked_patch_seeds").iterdir()) == ["backbone_1.pt", "seeds.json"]
    assert json.loads((repo / "models/masked_patch_seeds/seeds.json").read_text()) == {"backbone_1.pt": 1}
    run([sys.executable, "-m", "pipeline.stages.sweep", "linear,finetune", "4"], repo, env)
    for arm in ("linear", "finetune"):
        runs = json.loads((repo / f"metrics/data_hunger/{arm}_4.json").read_text())["runs"]
        assert (runs["0"]["backbone"], runs["1"]["backbone"]) == (0, 1), arm
