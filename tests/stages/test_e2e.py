"""Every stage end to end, through real `dvc repro` and a real MLflow store, on tiny synthetic data.

The paper preset runs against a loopback HTTP server that serves a synthetic ImageFolder zip and
a tiny ViT's state dict in place of torchvision's weights; the offline preset runs on IDX files
written here. Nothing leaves the machine.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
import shutil
import subprocess
import sys
import zipfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from loopback import running_server
from project_copy import clean_env, copy_project, set_params

from pipeline.core.arm_registry import ARMS, REGISTRY
from pipeline.core.params_yaml import load_params
from pipeline.models.vit import ViT, vit_config

REPO = Path(__file__).resolve().parents[2]
CLASSES = ("alpha", "beta", "gamma")
EVALUATE_KEYS = {"scratch", "linear", "baselines", "preset", "n_train", "n_val", "n_test", "classes", "protocol"}
ARM_KEYS = {"test_acc", "test_loss", "per_class", "collapse", "file_size_mb", "params"}
STAGES = (
    "download", "prepare", "backbone", "train_scratch", "linear_probe", "evaluate", "ablation", "collapse", "plot",
    "analysis", "pretrain_scale@vit-0", "pretrain_scale@resnet-0", "masked_patch", "masked_patch_seeds",
    "masked_patch_pool", "masked_patch_long", "pretraining_scale",
)  # fmt: skip
# The data-hunger sweep, cut to one point (data_hunger.points) so that the suite stays short: its matrices'
# items (point, or arm x point) and the stage that gathers them. tests/stages/test_data_hunger.py gathers five.
SWEEP_STAGES = (*dict.fromkeys(f"{arm.dvc_stage}@0" for arm in REGISTRY.values()), "data_hunger")

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A loopback HTTP server over a folder; yields (folder, base URL)."""
    root = tmp_path_factory.mktemp("served")
    with running_server(root) as served:
        yield root, served.url("")


def png_bytes(rng: np.random.Generator, label: int) -> bytes:
    from PIL import Image

    # Each class has its own colour so a model can learn something; sizes vary like real photos.
    height, width = rng.integers(36, 60, size=2)
    pixels = rng.integers(0, 80, size=(height, width, 3), dtype=np.uint8)
    pixels[..., label] += 150
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def image_folder_zip(per_class: dict[str, int]) -> bytes:
    rng = np.random.default_rng(0)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for split, count in per_class.items():
            for label, name in enumerate(CLASSES):
                for i in range(count):
                    archive.writestr(f"{split}/{name}/{i}.png", png_bytes(rng, label))
    return buffer.getvalue()


def run(args: list[str], cwd: Path, env: dict[str, str]) -> str:
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, f"{' '.join(args)} failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    return result.stdout + result.stderr


@pytest.fixture(scope="module")
def paper_repo(tmp_path_factory, server):
    """A git + DVC copy of the project set to the paper preset, after one `dvc repro`."""
    served, base = server
    archive = image_folder_zip({"train": 6, "test": 3})
    (served / "images.zip").write_bytes(archive)
    torch.manual_seed(0)
    weights = io.BytesIO()
    torch.save(ViT(vit_config("tiny", num_classes=10)).state_dict(), weights)
    (served / "tiny_vit.pth").write_bytes(weights.getvalue())

    repo = tmp_path_factory.mktemp("project")
    copy_project(repo)
    set_params(
        repo,
        preset="paper",
        seeds=[0, 1],
        paper={
            "url": f"{base}/images.zip",
            "sha256": hashlib.sha256(archive).hexdigest(),
            "model": "tiny",
            "backbone_model": "tiny",
            "weights_url": f"{base}/tiny_vit.pth",
            "weights_sha256": hashlib.sha256(weights.getvalue()).hexdigest()[:16],
        },
        train_scratch={"paper": {"epochs": 2, "batch_size": 8}},
        linear_probe={"paper": {"epochs": 2, "batch_size": 8}},
        validation={"paper_per_class": 2},
        pretraining_scale={"points": [0], "pool_per_class": [300]},  # the paper preset writes a note and stops
        # 6 training images per class, 2 of them validation: the one size is 4 per class
        data_hunger={
            "points": [0],
            "paper_fractions": [1.0],
            "offline_sizes": [10],
            "headline_point": 0,
            "max_epochs": 1,
            "min_steps": 4,
            "scores": 2,
            "patience": 1,
            "plateau_window": 1,
            "batch_size": 4,
        },
    )
    env = clean_env()
    run(["git", "init", "-q"], repo, env)
    run(["dvc", "init", "-q"], repo, env)
    shutil.copytree(REPO / ".dvc" / "plots", repo / ".dvc" / "plots")  # dvc.yaml's plot templates
    run(["dvc", "config", "core.analytics", "false"], repo, env)
    run(["git", "add", "-A"], repo, env)
    run(["git", "commit", "-qm", "project"], repo, env)
    output = run([sys.executable, "-m", "pipeline.tools.progress"], repo, env)  # what make repro runs: dvc repro
    return repo, env, output


def test_make_repros_progress_numbers_every_stage_of_the_run_in_order_out_of_its_total(paper_repo):
    """pipeline.tools.progress around the real dvc repro: a plan line with the total, "[stage k/N] name" as DVC
    starts each stage (k counting up, N the plan's), a closing line; the copy has no repro_time.json, so the
    time left is unknown and the lines say so rather than invent one."""
    _, _, output = paper_repo
    lines = output.splitlines()
    (plan,) = [line for line in lines if line.startswith("[plan] ")]
    total = int(re.match(r"\[plan\] (\d+) stages, \1 to run", plan)[1])
    started = [re.match(r"\[stage (\d+)/(\d+)\] (\S+)", line) for line in lines if line.startswith("[stage ")]
    ran = [
        line.removeprefix("Running stage '").removesuffix("':") for line in lines if line.startswith("Running stage")
    ]
    assert [m[3] for m in started] == ran and len(ran) == total == len(STAGES) + len(SWEEP_STAGES) + 1  # + summary
    assert [int(m[1]) for m in started] == list(range(1, total + 1)) and {int(m[2]) for m in started} == {total}
    assert lines[-1].startswith(f"[done] {total}/{total} stages in ")


def test_repro_runs_every_stage_and_writes_documented_metrics(paper_repo):
    repo, _, output = paper_repo
    for stage in STAGES + SWEEP_STAGES:
        assert f"Running stage '{stage}'" in output
    metrics = json.loads((repo / "metrics/evaluate.json").read_text())
    assert set(metrics) >= EVALUATE_KEYS
    assert metrics["preset"] == "paper"
    assert metrics["classes"] == list(CLASSES)
    assert (metrics["n_train"], metrics["n_val"], metrics["n_test"]) == (12, 6, 9)
    for arm in ("scratch", "linear"):
        assert set(metrics[arm]) >= ARM_KEYS
        acc = metrics[arm]["test_acc"]
        assert len(acc["per_seed"]) == 2 and all(a * 9 == round(a * 9) for a in acc["per_seed"])  # out of 9
        assert abs(acc["mean"] - sum(acc["per_seed"]) / 2) < 1e-12
        assert set(metrics[arm]["per_class"]) == set(CLASSES)
        # collapse: the share of the most predicted class, per seed, from the predictions DVC plots
        with open(repo / "plots/confusion" / f"{arm}.csv") as f:
            predicted: dict[str, list[str]] = {}
            for row in csv.DictReader(f):
                predicted.setdefault(row["seed"], []).append(row["predicted"])
        shares = [max(Counter(p).values()) / len(p) for p in predicted.values()]
        assert len(shares) == 2 and metrics[arm]["collapse"] == pytest.approx(sum(shares) / 2)
        assert 0 < metrics[arm]["file_size_mb"]["head"] < metrics[arm]["file_size_mb"]["model"]
    assert metrics["linear"]["params"]["trainable"] == 32 * 3 + 3  # D * classes + bias: only the head
    assert metrics["scratch"]["params"]["trainable"] == metrics["scratch"]["params"]["total"]
    assert metrics["baselines"]["chance"] == pytest.approx(1 / 3)
    assert metrics["baselines"]["majority"] == pytest.approx(1 / 3)
    curve = json.loads((repo / "metrics/data_hunger.json").read_text())
    assert metrics["protocol"] == {"n_train_per_class": 4, **{arm: curve[arm]["4"] for arm in ARMS}}
    for png in ("curves", "confusion", "comparison", "size_vs_accuracy", "ablation", "validation"):
        assert (repo / "plots" / f"{png}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (repo / "models/scratch/seed_1.pt").is_file() and (repo / "models/linear_probe/head_seed_1.pt").is_file()


def test_data_hunger_curve_has_every_arm_size_and_seed(paper_repo):
    repo, _, _ = paper_repo
    curve = json.loads((repo / "metrics/data_hunger.json").read_text())
    sizes = {"4"}
    for arm in ARMS:
        assert set(curve[arm]) == sizes
        for point in curve[arm].values():
            assert set(point) == {"mean", "std", "per_seed"} and len(point["per_seed"]) == 2
    assert set(curve["baselines"]) == sizes
    assert set(curve["baselines"]["4"]) == {"chance", "majority", "pixels_logreg"}
    assert (curve["n_val"], curve["n_test"]) == (6, 9)
    params = load_params(repo / "params.yaml")
    for arm in ("scratch", "cnn", "finetune"):  # trained under the validation rule: at most the cap of their budget
        cap = params.data_hunger.cap(arm, 4)  # a budget of 4 steps (min_steps)
        grid = getattr(params.data_hunger, arm).lrs
        assert all(run["steps"]["mean"] <= cap and run["lr"] in grid for run in curve["runs"][arm].values())
    validation = (repo / "plots/validation.csv").read_text().splitlines()
    assert validation[0] == "arm,n_train_per_class,seed,lr,step,train_loss,val_loss,val_acc"
    assert (repo / "plots/data_hunger.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_ablation_has_every_variant_and_seed(paper_repo):
    repo, _, _ = paper_repo
    summary = json.loads((repo / "metrics/ablation.json").read_text())
    assert summary["order"] == ["adam_l2", "adamw", "adam_no_decay"]
    assert set(summary["variants"]) == set(summary["order"])
    for result in summary["variants"].values():
        assert len(result["test_acc"]["per_seed"]) == 2
        assert all(a * 9 == round(a * 9) for a in result["test_acc"]["per_seed"])  # a count out of 9 images
    assert (summary["n_train"], summary["n_test"], summary["epochs"]) == (12, 9, 2)


def test_mlflow_records_every_training_run_with_tags(paper_repo):
    import mlflow

    repo, _, _ = paper_repo
    client = mlflow.MlflowClient(f"sqlite:///{repo / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("vit-paper")
    runs = client.search_runs([experiment.experiment_id])
    by_name = {run.info.run_name: run for run in runs}
    assert {"train_scratch-seed0", "train_scratch-seed1", "linear_probe-seed0", "linear_probe-seed1"} <= set(by_name)
    run = by_name["linear_probe-seed1"]
    assert run.data.tags["stage"] == "linear_probe" and run.data.tags["seed"] == "1"
    assert len(run.data.tags["git_commit"]) == 40 and "backbone_sha256" in run.data.tags
    assert "data_sha256" in run.data.tags
    stage = by_name["linear_probe"]  # the seeds' runs are nested in their stage's run, which has its params
    assert run.data.tags["mlflow.parentRunId"] == stage.info.run_id and run.data.params == {"seed": "1"}
    assert stage.data.params["linear_probe.paper.epochs"] == "2" and "train_scratch.paper.lr" not in stage.data.params
    assert stage.inputs.dataset_inputs[0].dataset.digest.endswith(".dir")  # DVC's md5 of data/prepared
    mlflow.set_tracking_uri(f"sqlite:///{repo / 'mlflow.db'}")
    model = mlflow.models.get_model_info(f"runs:/{run.info.run_id}/model")  # each seed's model, with a signature
    assert model.signature is not None and model.flavors.get("pytorch")
    history = client.get_metric_history(run.info.run_id, "val_acc")  # validation every epoch; test once, later
    assert [m.step for m in history] == [1, 2]
    (sweep,) = [run for name, run in by_name.items() if name.startswith("sweep-finetune-4-seed1-lr")]
    assert (sweep.data.tags["arm"], sweep.data.tags["n_train_per_class"]) == ("finetune", "4")
    curve = json.loads((repo / "metrics/data_hunger.json").read_text())
    assert sweep.data.metrics["final_test_acc"] == curve["finetune"]["4"]["per_seed"][1]
    # the first seed tries each lr of its arm's grid, the second seed runs the chosen one; probes run once a seed
    runs = [name for name in by_name if name.startswith("sweep-") and "-seed" in name]
    grids = load_params(repo / "params.yaml").data_hunger
    trained = sum(len(getattr(grids, arm).lrs) + 1 for arm in ("scratch", "cnn", "finetune"))
    assert len(runs) == trained + 2 * 2 and trained >= 3 * (3 + 1)  # at least three lrs per trained arm
    assert sum(name.startswith("ablation-") for name in by_name) == 3 * 2  # variant x seed
    evaluate = by_name["evaluate"].data.metrics  # the headline numbers reach MLflow too
    metrics = json.loads((repo / "metrics/evaluate.json").read_text())
    assert evaluate["linear.test_acc.mean"] == metrics["linear"]["test_acc"]["mean"]
    assert by_name["ablation-adamw-seed1"].data.tags["variant"] == "adamw"


def test_second_repro_is_a_no_op(paper_repo):
    repo, env, _ = paper_repo
    output = run(["dvc", "repro"], repo, env)
    assert "Running stage" not in output
    assert "up to date" in output.lower()


def test_changing_one_param_reruns_only_dependent_stages(paper_repo):
    repo, env, _ = paper_repo
    set_params(repo, data_hunger={"logreg_max_per_class": 5})  # read by the curve's gathering stage alone
    output = run(["dvc", "repro"], repo, env)
    ran = {stage for stage in STAGES + SWEEP_STAGES if f"Running stage '{stage}'" in output}
    assert ran == {"data_hunger"}  # its JSON is the same (the one size, 4 per class, is fit either way)


def test_push_then_fresh_clone_pulls_identical_results(paper_repo, tmp_path):
    repo, env, _ = paper_repo
    remote = tmp_path / "remote"
    run(["dvc", "remote", "add", "-d", "shared", str(remote)], repo, env)
    run(["dvc", "push"], repo, env)
    run(["git", "add", "-A"], repo, env)
    run(["git", "commit", "-qm", "results"], repo, env)
    clone = tmp_path / "clone"
    run(["git", "clone", "-q", str(repo), str(clone)], tmp_path, env)
    run(["dvc", "pull"], clone, env)
    status = run(["dvc", "status"], clone, env)
    assert "up to date" in status.lower()
    assert (clone / "metrics/evaluate.json").read_bytes() == (repo / "metrics/evaluate.json").read_bytes()
    for path in ("models/backbone.pt", "models/scratch/seed_0.pt", "data/prepared/manifest.csv"):
        assert (clone / path).read_bytes() == (repo / path).read_bytes()
    # the pulled models predict at once, nothing rerun (their cards carry classes, mean/std and transform)
    from PIL import Image

    Image.new("RGB", (50, 40), (20, 200, 30)).save(clone / "photo.png")
    lines = run([sys.executable, "-m", "pipeline.tools.predict", "photo.png"], clone, env).splitlines()
    assert any(line.startswith("photo.png: ") and all(c in line for c in CLASSES) for line in lines)
    assert "up to date" in run(["dvc", "status"], clone, env).lower()
    # the models are DVC artifacts: a version registered as a git tag (GTO's `name@vX.Y.Z`, what `dvc artifacts
    # get` and Studio's registry read), then `dvc artifacts get` fetches it from the repo's remote into any folder
    run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "tag", "-a", "vit-scratch@v1.0.0", "-m",
         "Registering artifact vit-scratch version v1.0.0"], repo, env)  # fmt: skip
    fetched = tmp_path / "fetched"
    run(["dvc", "artifacts", "get", str(repo), "vit-scratch", "-o", str(fetched)], tmp_path, env)
    assert (fetched / "seed_0.pt").read_bytes() == (repo / "models/scratch/seed_0.pt").read_bytes()


def test_plots_render_offline_and_overlay_two_revisions(paper_repo):
    """`python -m pipeline.tools.plots` writes a page that needs no network, with every data series."""
    repo, env, _ = paper_repo
    run([sys.executable, "-m", "pipeline.tools.plots"], repo, env)
    page = (repo / "dvc_plots" / "index.html").read_text()
    assert "cdn.jsdelivr" not in page and "vega-embed 6.29.0" in page
    for title in ("Data hunger", "The collapse, isolated", "confusion summed over seeds"):  # paper: no backbone
        assert title in page
    assert '"scale": {"type": "log"}' in page or '"type": "log"' in page  # images per class on a log axis
    curve = (repo / "plots" / "data_hunger.csv").read_text().splitlines()
    assert curve[0] == "arm,n_train_per_class,test_acc,test_acc_std"
    rows = [line.split(",")[0] for line in curve[1:]]
    assert len(rows) - rows.count("pixels_logreg") == 5  # one row per arm at the one size
    assert rows.count("pixels_logreg") >= 1
    run([sys.executable, "-m", "pipeline.tools.plots", "HEAD"], repo, env)  # dvc plots diff HEAD (workspace)
    assert "Data hunger" in (repo / "dvc_plots" / "index.html").read_text()
