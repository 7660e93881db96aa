"""The data-hunger sweep: nested subsets, sizes per preset, one point end to end, and the aggregate."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
import yaml
from helpers import params_with

from pipeline import arms, curve, data, paths, plotting
from pipeline.arms import cnn as cnn_arm
from pipeline.arms import finetune as finetune_arm
from pipeline.arms import scratch as scratch_arm
from pipeline.config import ConfigError
from pipeline.data import ImageSet
from pipeline.errors import UserError
from pipeline.model import ViT, vit_config
from pipeline.stages import ablation, data_hunger, plot, sweep

REPO = Path(__file__).resolve().parents[2]
FRACTIONS = [0.17, 0.34, 0.5, 0.67, 0.84, 1.0]  # of 6 images per class: 1, 2, 3, 4, 5, 6


def tiny_params(**data_hunger_values):
    return params_with(
        **{
            "preset": "paper",
            "seeds": [0, 1],
            "paper": {"model": "tiny", "backbone_model": "tiny"},
            "data_hunger": {"paper_fractions": FRACTIONS, "steps": 3, "batch_size": 4, **data_hunger_values},
        }
    )


def test_subsets_are_nested_deterministic_and_balanced():
    labels = torch.randint(0, 3, (300,), generator=torch.Generator().manual_seed(0))
    previous = set()
    for n in (1, 5, 20, 60):
        index = data.nested_indices(labels, n)
        assert torch.equal(index, data.nested_indices(labels, n))  # same seed, same subset
        assert torch.equal(index, index.sort().values) and len(set(index.tolist())) == len(index)
        assert Counter(labels[index].tolist()) == {0: n, 1: n, 2: n}
        assert previous <= set(index.tolist())  # every smaller set is inside the larger one
        previous = set(index.tolist())
    assert not torch.equal(data.nested_indices(labels, 20, seed=1), data.nested_indices(labels, 20))


def test_a_class_with_fewer_images_contributes_all_it_has():
    labels = torch.tensor([0] * 10 + [1] * 3)
    assert Counter(labels[data.nested_indices(labels, 5)].tolist()) == {0: 5, 1: 3}


def test_sizes_per_preset():
    labels = torch.tensor([0] * 6 + [1] * 6 + [2] * 5)
    assert curve.sweep_sizes(tiny_params().data_hunger, "paper", labels, 3) == [
        1,
        2,
        3,
        4,
        5,
        6,
    ]  # x the largest class, 6
    offline = params_with(data_hunger={"offline_sizes": [1, 2, 3, 4, 5, 6]})
    assert curve.sweep_sizes(offline.data_hunger, "offline", labels[:12], 2) == [1, 2, 3, 4, 5, 6]
    with pytest.raises(UserError, match="smallest class has 5"):
        curve.sweep_sizes(offline.data_hunger, "offline", labels, 3)
    with pytest.raises(UserError, match="same set"):
        curve.sweep_sizes(tiny_params(paper_fractions=[0.1, 0.11, 0.5, 0.6, 0.7, 1.0]).data_hunger, "paper", labels, 3)


def test_config_rejects_bad_sweeps_and_matches_dvc_yaml():
    with pytest.raises(ConfigError, match="data_hunger.offline_sizes must be strictly increasing"):
        params_with(data_hunger={"offline_sizes": [10, 10, 75, 250, 1000, 6000]})
    with pytest.raises(ConfigError, match=r"data_hunger.paper_fractions must list one value per sweep point \(6"):
        params_with(data_hunger={"paper_fractions": [0.5, 1.0]})
    with pytest.raises(ConfigError, match="data_hunger.points must be 0, 1, ..., n-1"):
        params_with(data_hunger={"points": [1, 2, 3, 4, 5, 6]})
    with pytest.raises(ConfigError, match="data_hunger.paper_fractions must be in"):
        params_with(data_hunger={"paper_fractions": [0.1, 0.2, 0.3, 0.5, 0.75, 1.5]})
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    for stage, arm in (("sweep_scratch", "scratch"), ("sweep_cnn", "cnn")):
        assert stages[stage]["matrix"] == {"point": "${data_hunger.points}"}
        assert stages[stage]["cmd"] == f"python -m pipeline.stages.sweep {arm} ${{item.point}}"
    assert stages["sweep_pretrained"]["matrix"] == {"arm": ["linear", "finetune"], "point": "${data_hunger.points}"}
    assert sorted(["scratch", "cnn", *stages["sweep_pretrained"]["matrix"]["arm"]]) == sorted(arms.ARMS)
    assert "metrics/data_hunger" in stages["data_hunger"]["deps"]  # the folder of every item's point file
    outs = [
        next(iter(out)) for name in ("sweep_scratch", "sweep_cnn", "sweep_pretrained") for out in stages[name]["outs"]
    ]
    assert all(out.startswith("metrics/data_hunger/") for out in outs)


@pytest.fixture
def tiny_project(tmp_path, monkeypatch):
    """A paper-preset prepared folder (6 train, 2 test images per class) and a tiny backbone, in tmp."""
    monkeypatch.chdir(tmp_path)
    generator = torch.Generator().manual_seed(0)
    for view in paths.VIEWS:
        for split, per_class in (("train", 6), ("test", 2)):
            labels = torch.arange(3).repeat_interleave(per_class)
            images = torch.randint(0, 80, (len(labels), 3, 32, 32), dtype=torch.uint8, generator=generator)
            images[torch.arange(len(labels)), labels] += 150  # each class its own colour
            ImageSet(images, labels, ["a", "b", "c"], (0.5,) * 3, (0.25,) * 3).save(paths.prepared_split(view, split))
    torch.manual_seed(0)
    paths.BACKBONE.parent.mkdir(parents=True)
    torch.save(ViT(vit_config("tiny", num_classes=10)).state_dict(), paths.BACKBONE)

    class NoTracking:  # a Tracker that records nothing (MLflow's own set-up costs seconds per run)
        def __init__(self, *args, **kwargs) -> None:
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc) -> None:
            pass

        def child(self, *args, **kwargs):
            return self

        def log_metrics(self, *args, **kwargs) -> None:
            pass

    no_tracking = NoTracking

    monkeypatch.setattr(sweep, "stage_tracker", no_tracking)  # MLflow is covered by tests/test_e2e.py
    monkeypatch.setattr(ablation, "stage_tracker", no_tracking)
    return tmp_path


def test_one_point_of_every_arm_writes_the_documented_keys(tiny_project, monkeypatch):
    params = tiny_params(cnn_widths=[4, 8])
    monkeypatch.setattr(sweep, "load_params", lambda: params)
    trained = {}
    for arm in arms.ARMS:
        monkeypatch.setattr(sys, "argv", ["sweep", arm, "2"])
        sweep.main()
        summary = json.loads(curve.point_path(arm, 2).read_text())
        assert set(summary) == {"arm", "point", "n_train_per_class", "n_train", "n_test", "steps", "batch_size",
                                "trained_parameters", "test_acc", "test_loss", "train_loss", "runtime"}  # fmt: skip
        assert (summary["arm"], summary["point"], summary["n_train_per_class"]) == (arm, 2, 3)
        assert (summary["n_train"], summary["n_test"], summary["steps"]) == (9, 6, 3)
        acc = summary["test_acc"]
        assert set(acc) == {"mean", "std", "per_seed"} and len(acc["per_seed"]) == 2
        assert all(0 <= a <= 1 for a in acc["per_seed"])
        trained[arm] = summary["trained_parameters"]
    tiny_vit = ViT(vit_config("tiny", num_classes=3))
    assert trained["scratch"] == trained["finetune"] == sum(p.numel() for p in tiny_vit.parameters())
    assert trained["linear"] == 32 * 3 + 3  # the head alone: tiny's hidden size 32, three classes
    assert trained["cnn"] == sum(
        p.numel() for p in cnn_arm.small_resnet(3, 3, tuple(params.data_hunger.cnn_widths)).parameters()
    )


def test_finetune_model_keeps_the_backbone_and_adds_a_zero_head():
    torch.manual_seed(0)
    backbone = ViT(vit_config("tiny", num_classes=10))
    model = finetune_arm.finetune_model(backbone, 3)
    assert model.heads.head.weight.shape == (3, 32) and not model.heads.head.weight.any()
    assert torch.equal(model.conv_proj.weight, backbone.conv_proj.weight)
    assert all(p.requires_grad for p in model.parameters())


def test_bad_arguments_name_the_usage():
    with pytest.raises(UserError, match="usage: python -m pipeline.stages.sweep"):
        sweep.parse_args(["scratch", "6"], list(range(6)))
    with pytest.raises(UserError, match="usage"):
        sweep.parse_args(["pretrained", "0"], list(range(6)))
    assert sweep.parse_args(["cnn", "5"], list(range(6))) == ("cnn", 5)


def test_aggregate_writes_the_curve_json_and_png(tiny_project, monkeypatch):
    params = tiny_params(logreg_max_per_class=3)
    monkeypatch.setattr(data_hunger, "load_params", lambda: params)
    for arm in arms.ARMS:
        for point in params.data_hunger.points:
            n = point + 1
            acc = {"mean": 0.5, "std": 0.1, "per_seed": [0.4, 0.6]}
            summary = {"arm": arm, "point": point, "n_train_per_class": n, "n_train": 3 * n, "n_test": 6,
                       "steps": 3, "batch_size": 4, "trained_parameters": 1000 * n, "test_acc": acc}  # fmt: skip
            curve.point_path(arm, point).parent.mkdir(parents=True, exist_ok=True)
            curve.point_path(arm, point).write_text(json.dumps(summary))
    data_hunger.main()
    metrics = json.loads((paths.METRICS / "data_hunger.json").read_text())
    for arm in arms.ARMS:
        assert set(metrics[arm]) == {str(n) for n in range(1, 7)}
        assert metrics[arm]["3"] == {"mean": 0.5, "std": 0.1, "per_seed": [0.4, 0.6]}
    assert set(metrics["baselines"]) == {str(n) for n in range(1, 7)}
    base = metrics["baselines"]["6"]
    assert base["chance"] == pytest.approx(1 / 3) and base["majority"] == pytest.approx(1 / 3)
    assert "pixels_logreg" not in base and 0 <= metrics["baselines"]["3"]["pixels_logreg"] <= 1  # fit up to 3
    assert metrics["trained_parameters"] == {arm: 1000 for arm in arms.ARMS}
    assert (paths.PLOTS / "data_hunger.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_aggregate_refuses_a_missing_point(tiny_project, monkeypatch):
    monkeypatch.setattr(data_hunger, "load_params", tiny_params)
    with pytest.raises(SystemExit):
        data_hunger.main()


def test_ablation_variants_map_to_recipe_augmentation_and_pooling():
    params = params_with()
    cfg, seed_cfg = params.data_hunger, params.scratch_recipe
    seed_recipe, augment, pool = scratch_arm.variant_settings("seed", cfg, seed_cfg)
    assert (seed_recipe.optimizer, seed_recipe.lr, seed_recipe.weight_decay) == ("adam", 0.003, 0.3)
    assert (seed_recipe.schedule, seed_recipe.grad_clip, augment, pool) == ("none", 0.0, False, "cls")
    assert seed_recipe.batch_size == params.data_hunger.batch_size  # the sweep's budget, not the seed's 32
    paper_recipe, augment, pool = scratch_arm.variant_settings(
        "paper+aug+mean", params.data_hunger, params.scratch_recipe
    )
    assert (paper_recipe.optimizer, paper_recipe.lr, paper_recipe.schedule) == ("adamw", 0.001, "cosine")
    assert (paper_recipe.warmup_fraction, paper_recipe.grad_clip, augment, pool) == (0.1, 1.0, True, "mean")
    assert scratch_arm.variant_settings("seed+mean", cfg, seed_cfg)[1:] == (False, "mean")


@pytest.mark.parametrize("variants", [["sgd"], ["paper+flip"], ["paper+aug+aug"], ["seed", "seed"], []])
def test_config_rejects_unknown_ablation_variants(variants):
    with pytest.raises(ConfigError, match="ablation.variants"):
        params_with(ablation={"variants": variants})


def test_ablation_stage_writes_every_variant_and_the_plot_stage_draws_it(tiny_project, monkeypatch):
    params = params_with(**{"preset": "paper", "seeds": [0, 1], "paper": {"model": "tiny", "backbone_model": "tiny"},
                           "data_hunger": {"paper_fractions": FRACTIONS, "steps": 3, "batch_size": 4},
                           "ablation": {"variants": ["seed", "paper+aug+mean"]}})  # fmt: skip
    monkeypatch.setattr(ablation, "load_params", lambda: params)
    ablation.main()
    summary = json.loads(ablation.OUTPUT.read_text())
    assert summary["order"] == ["seed", "paper+aug+mean"] and set(summary["variants"]) == set(summary["order"])
    for result in summary["variants"].values():
        assert set(result) == {"test_acc", "test_loss", "train_loss", "collapse"}
        assert len(result["test_acc"]["per_seed"]) == 2 and 0 <= result["test_acc"]["mean"] <= 1
        assert all(1 / 3 <= c <= 1 for c in result["collapse"]["per_seed"])
    assert (summary["n_train"], summary["n_test"], summary["steps"], summary["batch_size"]) == (18, 6, 3, 4)
    assert set(summary["baselines"]) == {"chance", "majority", "pixels_logreg"}
    seeds = summary["variants"]["seed"]["test_acc"]["per_seed"]
    ablation.main()  # same params and seeds: the same numbers
    assert json.loads(ablation.OUTPUT.read_text())["variants"]["seed"]["test_acc"]["per_seed"] == seeds

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    evaluate_metrics = {"linear": {"test_acc": {"mean": 0.5}}}
    plotting.plot_ablation(plt, summary, evaluate_metrics)
    assert (paths.PLOTS / "ablation.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_stage_without_its_inputs_names_the_missing_file_in_one_line(tiny_project, capsys):
    with pytest.raises(SystemExit) as stopped:
        plot.main()
    assert stopped.value.code == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == ["error in stage plot: metrics/evaluate.json is missing; run `dvc repro`, which makes the "
                     "plot stage's inputs first"]  # fmt: skip
