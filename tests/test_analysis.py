"""Analysis stage (attention, position similarity, resolution change), predict CLI and MLflow comparison.

Every test runs on the "tiny" model and a few random images in a temporary project directory.
"""

from __future__ import annotations

import json
import sys

import pandas as pd
import pytest
import torch
import yaml
from conftest import png_claiming
from PIL import Image
from torch import nn

from pipeline import analysis, compare, paths, predict
from pipeline.config import flatten, load_params, parse_params
from pipeline.data import ImageSet
from pipeline.engine import evaluate
from pipeline.files import save_tensors
from pipeline.model import ViT, vit_config
from pipeline.runtime import Runtime
from pipeline.tracking import Tracker

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
        "offline": {"model": "tiny"},
        "paper": {"model": "tiny", "backbone_model": "tiny"},
        "evaluate": {"batch_size": 5},
    }
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    monkeypatch.chdir(tmp_path)
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (12, 3, 32, 32), dtype=torch.uint8, generator=generator)
    labels = torch.tensor([2, 0, 1, 0, 1, 2, 0, 1, 2, 0, 1, 2])
    for arm in paths.ARMS:
        ImageSet(images, labels, CLASSES, (0.5,) * 3, (0.25,) * 3).save(paths.prepared_split(arm, "test"))
    for seed in SEEDS:
        save_tensors(paths.scratch_model(seed), random_vit(seed, len(CLASSES)).state_dict())
        head = random_vit(10 + seed, len(CLASSES)).heads.head
        save_tensors(paths.head_model(seed), {"heads.head.weight": head.weight, "heads.head.bias": head.bias})
    save_tensors(paths.BACKBONE, random_vit(99, 5).state_dict())
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


# --- attention, rollout, position similarity -------------------------------------------------


def test_rollout_of_one_layer_is_its_head_mean_plus_identity_renormalised():
    model = random_vit(0, 3, num_layers=1).eval()
    attention = model.attention_maps(torch.randn(2, 3, 32, 32))
    rollout = analysis.attention_rollout(attention)
    mixed = attention[0].mean(dim=1) + torch.eye(17)
    torch.testing.assert_close(rollout, mixed / mixed.sum(dim=-1, keepdim=True))
    torch.testing.assert_close(rollout.sum(dim=-1), torch.ones(2, 17))


def test_rollout_multiplies_layers_last_on_the_left_and_rows_sum_to_one():
    model = random_vit(0, 3, num_layers=3).eval()
    attention = model.attention_maps(torch.randn(2, 3, 32, 32))
    rollout = analysis.attention_rollout(attention)
    steps = [analysis.attention_rollout([a]) for a in attention]
    torch.testing.assert_close(rollout, steps[2] @ steps[1] @ steps[0])
    torch.testing.assert_close(rollout.sum(dim=-1), torch.ones(2, 17))
    assert (rollout >= 0).all()


def test_cls_attention_is_the_class_token_row_over_patches_averaged_over_heads():
    model = random_vit(0, 3).eval()
    attention = model.attention_maps(torch.randn(2, 3, 32, 32))
    maps = analysis.cls_attention(attention)
    assert maps.shape == (2, 2, 16)  # (B, layers, patches)
    torch.testing.assert_close(maps[:, 1], attention[1][:, :, 0, 1:].mean(dim=1))


def test_position_similarity_has_ones_on_the_diagonal_and_is_symmetric():
    pos = random_vit(0, 3).encoder.pos_embedding  # (1, 1 + 4*4, D)
    similarity = analysis.position_similarity(pos)
    assert similarity.shape == (4, 4, 4, 4)
    flat = similarity.reshape(16, 16)
    torch.testing.assert_close(flat.diagonal(), torch.ones(16))
    torch.testing.assert_close(flat, flat.T)
    assert flat.abs().max() <= 1 + 1e-6


def test_first_of_each_class_is_fixed_by_index_and_capped():
    labels = torch.tensor([2, 0, 1, 0, 1, 2, 3, 4])
    assert analysis.first_of_each_class(labels, limit=4) == [1, 2, 0, 6]


@pytest.mark.parametrize(("size", "patch", "expected"), [(28, 7, 42), (224, 16, 336), (32, 8, 48), (32, 32, 64)])
def test_other_size_is_about_one_and_a_half_times_in_whole_patches(size, patch, expected):
    assert analysis.other_size(size, patch) == expected


def test_shown_layers_keeps_all_or_spreads_them_to_the_last():
    assert analysis.shown_layers(6) == [0, 1, 2, 3, 4, 5]
    assert analysis.shown_layers(12) == [0, 2, 4, 7, 9, 11]


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
        model = analysis.load_pretrained(params, 3, seed, CPU)
        expected = evaluate(model, test_set.images, test_set.labels, CPU, 5, lambda x, t, g: test_set.normalise(x))
        assert reported == expected.accuracy


def test_accuracy_at_a_new_size_uses_interpolated_embeddings_on_a_copy(project):
    params = load_params()
    test_set = ImageSet.load(paths.prepared_split("pretrained", "test"))
    backbone = analysis.load_backbone(params, CPU)
    before = backbone.encoder.pos_embedding.clone()
    heads = {0: nn.Linear(32, 3)}
    result = analysis.accuracy_at_size(backbone, heads, test_set, 48, CPU, 5)
    assert result["size"] == 48 and 0 <= result["test_acc"]["mean"] <= 1
    assert torch.equal(backbone.encoder.pos_embedding, before) and backbone.config.image_size == 32


# --- predict ---------------------------------------------------------------------------------


def parse_line(line: str) -> tuple[str, list[tuple[str, float]]]:
    path, _, rest = line.rpartition(": ")
    words = rest.split()
    return path, [(words[i], float(words[i + 1])) for i in range(0, len(words), 2)]


@pytest.mark.parametrize("arm", paths.ARMS)
def test_predict_prints_sorted_probabilities_summing_to_one_for_png_and_odd_grey_jpeg(
    project, monkeypatch, capsys, arm
):
    rng = torch.Generator().manual_seed(1)
    colour = torch.randint(0, 256, (37, 53, 3), dtype=torch.uint8, generator=rng).numpy()
    Image.fromarray(colour).save(project / "photo.png")
    Image.fromarray(colour[:, :, 0]).save(project / "grey.jpg")
    status, out, _ = run_cli(predict, monkeypatch, capsys, "photo.png", "grey.jpg", "--model", arm, "--invert")
    assert status == 0
    lines = out.strip().splitlines()
    assert [parse_line(line)[0] for line in lines] == ["photo.png", "grey.jpg"]
    for line in lines:
        pairs = parse_line(line)[1]
        assert sorted(name for name, _ in pairs) == sorted(CLASSES)
        probabilities = [p for _, p in pairs]
        assert probabilities == sorted(probabilities, reverse=True)
        assert abs(sum(probabilities) - 1) <= 0.002  # three values printed to 3 decimals


def test_predict_on_a_saved_test_image_matches_the_model_on_the_stored_tensor(project):
    params = load_params()
    test_set = ImageSet.load(paths.prepared_split("scratch", "test"))
    Image.fromarray(test_set.images[3].permute(1, 2, 0).numpy()).save(project / "test3.png")
    model = predict.load_model(params, "scratch", 1, 3, CPU)
    image = predict.load_image(
        project / "test3.png", 32, "resize", 3, invert=False, max_pixels=params.images.max_pixels
    )
    assert torch.equal(image, test_set.images[3])
    probabilities = predict.predict(model, test_set, image[None], CPU)
    expected = torch.softmax(model(test_set.normalise(test_set.images[3:4])), dim=-1)
    torch.testing.assert_close(probabilities, expected)
    torch.testing.assert_close(probabilities.sum(), torch.tensor(1.0))


def test_predict_rejects_a_text_file_named_jpg_in_one_line(project, monkeypatch, capsys):
    (project / "x.jpg").write_text("not an image")
    status, out, err = run_cli(predict, monkeypatch, capsys, "x.jpg")
    assert status == 1 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert "x.jpg is not a readable image" in err and "Traceback" not in err


def test_predict_refuses_an_image_over_the_pixel_cap_from_its_header_in_one_line(project, monkeypatch, capsys):
    (project / "bomb.png").write_bytes(png_claiming(15000, 15000))  # 225 megapixels in a few hundred bytes
    status, out, err = run_cli(predict, monkeypatch, capsys, "bomb.png")
    assert status == 1 and out == ""
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "bomb.png is 15000x15000 = 225,000,000 pixels, over the cap of 89,478,485" in err
    assert "images.max_pixels" in err


def test_predict_with_a_missing_model_says_run_dvc_repro_in_one_line(project, monkeypatch, capsys):
    Image.new("L", (30, 30)).save(project / "a.png")
    status, _, err = run_cli(predict, monkeypatch, capsys, "a.png", "--seed", "7")
    assert status == 1
    assert len(err.strip().splitlines()) == 1
    assert "head_seed_7.pt is missing" in err and "dvc repro" in err and "dvc pull" in err


def test_predict_transform_is_crop_only_for_the_paper_pretrained_view(project):
    params = load_params()
    assert predict.transform_mode(params, "pretrained") == predict.transform_mode(params, "scratch") == "resize"
    paper = parse_params({"preset": "paper"})
    assert predict.transform_mode(paper, "pretrained") == "crop"
    assert predict.transform_mode(paper, "scratch") == "resize"


# --- compare ---------------------------------------------------------------------------------


def test_compare_tables_every_run_and_the_seed_mean_and_std(project, monkeypatch, capsys):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{project / 'mlflow.db'}")
    monkeypatch.setenv("DVC_EXP_NAME", "lr-sweep")
    params = load_params()
    for seed, accuracy in zip(SEEDS, (0.5, 0.7), strict=True):
        tags = {"stage": "train_scratch", "preset": "offline", "arm": "scratch", "seed": str(seed)}
        with Tracker("vit-offline", f"train_scratch-seed{seed}", tags, flatten(params)) as tracker:
            assert tracker.client is not None
            tracker.log_metrics({"test_acc": 0.1}, step=1)
            tracker.log_metrics({"final_test_acc": accuracy})
    status, out, _ = run_cli(compare, monkeypatch, capsys)
    assert status == 0
    table = pd.read_csv(project / "reports" / "compare.csv")
    assert list(table["run"]) == ["train_scratch-seed0", "train_scratch-seed1"]
    assert list(table["test_acc"]) == [0.5, 0.7]
    assert set(table["dvc_experiment"]) == {"lr-sweep"} and set(table["arm"]) == {"scratch"}
    assert list(table["lr"]) == [params.train_scratch.offline.lr] * 2
    assert (table["wall_time_s"] >= 0).all()
    report = (project / "reports" / "compare.md").read_text()
    assert "0.6000 ± 0.1414" in report and "| train_scratch | scratch |" in report
    assert report in out


def test_compare_without_a_store_or_runs_says_so_in_one_line(project, monkeypatch, capsys):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("DVC_ROOT", raising=False)
    status, _, err = run_cli(compare, monkeypatch, capsys)
    assert status == 1 and "no MLflow store" in err and "dvc repro" in err
    assert not (project / "mlflow.db").exists()  # reading must not create an empty store

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{project / 'other.db'}")
    with Tracker("vit-paper", "x", {}, {}):  # a store that holds only another preset's experiment
        pass
    capsys.readouterr()  # MLflow's own log lines from creating that store
    status, _, err = run_cli(compare, monkeypatch, capsys)
    assert status == 1 and "no experiment 'vit-offline'" in err
    assert len(err.strip().splitlines()) == 1
