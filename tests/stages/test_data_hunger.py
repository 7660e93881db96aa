"""The data-hunger sweep: nested subsets, sizes per preset, one point end to end, and the aggregate."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest
from helpers import CPU, params_with, tiny_params

from pipeline.arms import linear as linear_arm
from pipeline.arms import scratch as scratch_arm
from pipeline.arms.protocol import Curve
from pipeline.core import arm_registry as arms
from pipeline.core import paths
from pipeline.core.errors import UserError
from pipeline.data import subsets as curve
from pipeline.models.resnet import small_resnet
from pipeline.models.vit import ViT, vit_config
from pipeline.results import figures as plotting
from pipeline.stages import ablation, collapse, data_hunger, plot, sweep

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def tiny_project(curve_project, monkeypatch):
    """The arms' prepared folder and backbone (tiny_project.curve_project), the sweep and ablation stages
    tracking nothing."""

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

        def log_record(self, *args, **kwargs) -> None:
            pass

    no_tracking = NoTracking

    monkeypatch.setattr(sweep, "stage_tracker", no_tracking)  # MLflow is covered by tests/stages/test_e2e.py
    monkeypatch.setattr(ablation, "stage_tracker", no_tracking)
    monkeypatch.setattr(collapse, "stage_tracker", no_tracking)
    return curve_project


POINT_KEYS = {"arm", "point", "n_train_per_class", "n_train", "n_val", "n_test", "trained_parameters", "test_acc",
              "train_loss", "val_acc", "runs", "runtime"}  # fmt: skip
TRAINED_KEYS = {
    "test_loss",
    "val_loss",
    "best_step",
    "steps",
    "lr",
    "lr_trials",
    "lr_at_edge",
    "budget",
    "stopped_at_cap",
}


def test_one_point_of_every_arm_writes_the_documented_keys(tiny_project, monkeypatch):
    params = tiny_params(cnn_widths=[4, 8])
    monkeypatch.setattr(sweep, "load_params", lambda: params)
    trained = {}
    for arm in arms.ARMS:
        monkeypatch.setattr(sys, "argv", ["sweep", arm, "2"])
        sweep.main()
        summary = json.loads(curve.point_path(arm, 2).read_text())
        expected = (
            POINT_KEYS
            | (TRAINED_KEYS if arm in arms.TRAINED else set())
            | ({"reg", "reg_at_edge"} if arm != "cnn" and arm != "scratch" else set())
        )
        assert set(summary) == expected
        assert (summary["arm"], summary["point"], summary["n_train_per_class"]) == (arm, 2, 3)
        assert (summary["n_train"], summary["n_val"], summary["n_test"]) == (9, 6, 6)
        acc = summary["test_acc"]
        assert set(acc) == {"mean", "std", "per_seed"} and len(acc["per_seed"]) == 2
        assert all(a * 6 == round(a * 6) for a in acc["per_seed"])  # per image: a count out of 6 test images
        assert set(summary["runs"]) == {"0", "1"}
        if arm in arms.TRAINED:
            lrs = getattr(params.data_hunger, arm).lrs
            assert set(summary["lr_trials"]) == {f"{lr:g}" for lr in lrs}
            # the first seed's best validation score: accuracy, then loss; of equals the smaller lr
            trials = summary["lr_trials"]
            best = max(trials, key=lambda lr: (trials[lr]["val_acc"], -trials[lr]["val_loss"], -float(lr)))
            assert f"{summary['lr']:g}" == best and {r["lr"] for r in summary["runs"].values()} == {summary["lr"]}
            assert summary["lr_at_edge"] in ("low", "high", "") and summary["budget"] == 6
            for run in summary["runs"].values():
                assert run["curve"][0]["step"] == 0  # every trained run is scored before its first step
                cap = params.data_hunger.cap(arm, summary["budget"])  # the plateau schedule: cap_factor budgets
                assert run["best_step"] in [r["step"] for r in run["curve"]] and run["steps"] <= cap
                kept = max(run["curve"], key=lambda r: (r["val_acc"], -r["val_loss"]))
                assert (run["val_acc"], run["val_loss"]) == (kept["val_acc"], kept["val_loss"])
                if getattr(params.data_hunger, arm).schedule == "plateau":  # ends its cooldown, or at the cap
                    assert run["steps"] == cap or run["steps"] > run["decay_step"]
                else:
                    assert run["steps"] == cap or run["steps"] - run["best_step"] >= 2  # patience 1 x 2 steps a score
        trained[arm] = summary["trained_parameters"]
    tiny_vit = ViT(vit_config("tiny", num_classes=3))
    assert trained["scratch"] == trained["finetune"] == sum(p.numel() for p in tiny_vit.parameters())
    assert trained["linear"] == 32 * 3 + 3  # the probe: tiny's hidden size 32, three classes
    assert trained["pixels"] == (3 * 32 * 32) * 3 + 3
    assert trained["cnn"] == sum(
        p.numel() for p in small_resnet(3, 3, tuple(params.data_hunger.cnn_widths)).parameters()
    )


def test_the_test_set_chooses_nothing(tiny_project):
    """A run trains, stops, keeps its weights and picks its ridge without the test set: with it removed, every
    number but the test score is the same, and only the score needs it."""
    params = tiny_params()
    curve_ = Curve("paper", "tiny", "tiny", "supervised", params.data_hunger, 8, CPU)
    for module, lr in ((scratch_arm, 0.001), (linear_arm, None)):
        data_ = module.point_data(curve_, 2)
        before = module.run_seed(curve_, data_, 0, lr)
        assert set(before["score"]()) >= {"test_acc"}
        after = module.run_seed(curve_, dataclasses.replace(data_, test=None, test_features=None), 0, lr)
        assert {k: v for k, v in before.items() if k != "score"} == {k: v for k, v in after.items() if k != "score"}
        with pytest.raises((AttributeError, TypeError)):
            after["score"]()


def test_bad_arguments_name_the_usage():
    with pytest.raises(UserError, match="usage: python -m pipeline.stages.sweep"):
        sweep.parse_args(["scratch", "5"], list(range(5)))
    with pytest.raises(UserError, match="usage"):
        sweep.parse_args(["pretrained", "0"], list(range(5)))
    with pytest.raises(UserError, match="usage"):
        sweep.parse_args(["linear,linear", "0"], list(range(5)))
    assert sweep.parse_args(["pixels", "4"], list(range(5))) == (["pixels"], 4)
    assert sweep.parse_args(["linear,finetune", "0"], list(range(5))) == (["linear", "finetune"], 0)


def test_the_transfer_arms_in_one_process_share_the_backbone_and_probes_and_write_what_two_would(
    tiny_project, monkeypatch
):
    """dvc.yaml's sweep_pretrained runs ``linear,finetune``: one backbone load, one set of frozen features and
    probes, and point files equal to those of two separate processes."""
    params = tiny_params()
    monkeypatch.setattr(sweep, "load_params", lambda: params)
    loads = []
    load_backbone = linear_arm.load_backbone
    monkeypatch.setattr(linear_arm, "load_backbone", lambda *a: loads.append(a) or load_backbone(*a))
    files = [curve.point_path(arm, 2) for arm in ("linear", "finetune")]
    for arm in ("linear", "finetune"):
        monkeypatch.setattr(sys, "argv", ["sweep", arm, "2"])
        sweep.main()
    apart = [f.read_bytes() for f in files]
    assert len(loads) == 2
    monkeypatch.setattr(sys, "argv", ["sweep", "linear,finetune", "2"])
    sweep.main()
    assert len(loads) == 3 and [f.read_bytes() for f in files] == apart


def test_aggregate_writes_the_curve_json_and_png(tiny_project, monkeypatch):
    params = tiny_params(logreg_max_per_class=3)
    monkeypatch.setattr(data_hunger, "load_params", lambda: params)
    sizes = [1, 2, 3, 4, 6]
    for arm in arms.ARMS:
        for point, n in zip(params.data_hunger.points, sizes, strict=True):
            acc = {"mean": 0.5, "std": 0.1, "per_seed": [0.4, 0.6]}
            summary = {"arm": arm, "point": point, "n_train_per_class": n, "n_train": 3 * n, "n_val": 6, "n_test": 6,
                       "trained_parameters": 1000 * n, "test_acc": acc, "train_loss": acc}  # fmt: skip
            if arm in arms.TRAINED:
                curve_ = [{"step": 2, "train_loss": 1.0, "val_loss": 0.9, "val_acc": 0.5}]
                summary |= {"lr": 0.001, "best_step": acc, "runs": {"0": {"lr": 0.001, "curve": curve_, "best_step": 2,
                            "val_loss": 0.9, "val_acc": 0.5, "budget": 4}}}  # fmt: skip
            curve.point_path(arm, point).parent.mkdir(parents=True, exist_ok=True)
            curve.point_path(arm, point).write_text(json.dumps(summary))
    data_hunger.main()
    metrics = json.loads((paths.METRICS / "data_hunger.json").read_text())
    acc = {"mean": 0.5, "std": 0.1, "per_seed": [0.4, 0.6]}
    for arm in arms.ARMS:
        assert set(metrics[arm]) == {str(n) for n in sizes}
        assert metrics[arm]["3"] == acc
    assert metrics["runs"]["scratch"]["3"] == {"lr": 0.001, "best_step": acc, "train_loss": acc}
    assert set(metrics["baselines"]) == {str(n) for n in sizes}
    base = metrics["baselines"]["6"]
    assert base["chance"] == pytest.approx(1 / 3) and base["majority"] == pytest.approx(1 / 3)
    assert "pixels_logreg" not in base and "pixels_logreg" in metrics["baselines"]["3"]  # fit up to 3
    assert metrics["trained_parameters"] == {arm: 1000 for arm in arms.ARMS}
    assert (metrics["n_val"], metrics["n_test"]) == (6, 6)
    assert (paths.PLOTS / "data_hunger.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (paths.PLOTS / "validation.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = (paths.PLOTS / "validation.csv").read_text().splitlines()
    assert rows[0] == "arm,n_train_per_class,seed,lr,step,train_loss,val_loss,val_acc"
    assert rows[1] == "scratch,1,0,0.001,2,1,0.9,0.5" and len(rows) == 1 + 3 * len(sizes)  # 3 trained arms


def test_aggregate_refuses_a_missing_point(tiny_project, monkeypatch):
    monkeypatch.setattr(data_hunger, "load_params", tiny_params)
    with pytest.raises(SystemExit):
        data_hunger.main()


def test_ablation_stage_writes_every_variant_and_the_plot_stage_draws_it(tiny_project, monkeypatch):
    params = params_with(**{"preset": "paper", "seeds": [0, 1], "paper": {"model": "tiny", "backbone_model": "tiny"},
                           "train_scratch": {"paper": {"epochs": 2, "batch_size": 8, "dropout": 0.0}}})  # fmt: skip
    monkeypatch.setattr(ablation, "load_params", lambda: params)
    ablation.main()
    summary = json.loads(ablation.OUTPUT.read_text())
    assert summary["order"] == ["adam_l2", "adamw", "adam_no_decay"] and set(summary["variants"]) == set(
        summary["order"]
    )
    for result in summary["variants"].values():
        assert set(result) == {"test_acc", "test_loss", "train_loss", "val_acc", "val_loss", "collapse", "weight_rms",
                               "weight_rms_initial", "attention0_rms", "attention0_rms_initial"}  # fmt: skip
        assert all(a * 6 == round(a * 6) for a in result["test_acc"]["per_seed"])  # a count out of 6 images
    initial = {v["weight_rms_initial"]["mean"] for v in summary["variants"].values()}
    assert len(initial) == 1  # every variant starts from the seed's same initial weights
    rms = {name: v["weight_rms"]["mean"] for name, v in summary["variants"].items()}
    assert rms["adam_l2"] < rms["adam_no_decay"]  # decay added to the gradient shrinks the weights
    assert (summary["n_train"], summary["n_val"], summary["n_test"], summary["epochs"]) == (18, 6, 6, 2)
    rows = (paths.PLOTS / "ablation.csv").read_text().splitlines()
    assert rows[0].split(",")[:5] == ["epoch", "adam_l2_weight_rms", "adam_l2_attention0_rms", "adam_l2_train_loss",
                                      "adam_l2_val_loss"]  # fmt: skip
    assert len(rows) == 1 + 3 and rows[1].split(",")[3] == ""  # epochs 0..2; epoch 0 has no loss yet
    seeds = summary["variants"]["adamw"]["test_acc"]["per_seed"]
    ablation.main()  # same params and seeds: the same numbers
    assert json.loads(ablation.OUTPUT.read_text())["variants"]["adamw"]["test_acc"]["per_seed"] == seeds

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plotting.plot_ablation(plt, summary, plotting.read_epochs_csv((paths.PLOTS / "ablation.csv").read_text()))
    assert (paths.PLOTS / "ablation.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_stage_without_its_inputs_names_the_missing_file_in_one_line(tiny_project, capsys):
    with pytest.raises(SystemExit) as stopped:
        plot.main()
    assert stopped.value.code == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == ["error in stage plot: metrics/evaluate.json is missing; run `dvc repro` (an earlier stage "
                     "makes it)"]  # fmt: skip


def test_collapse_stage_changes_seed_000s_recipe_one_setting_at_a_time_and_pairs_each_with_it(
    tiny_project, monkeypatch
):
    params = tiny_params(scratch={"lrs": [0.001, 0.003], "schedule": "plateau", "weight_decay": 0.05},
                         headline_point=2)  # fmt: skip
    seed_recipe = dataclasses.replace(params.train_scratch.paper, epochs=2, batch_size=8)
    params = dataclasses.replace(params, train_scratch=dataclasses.replace(params.train_scratch, paper=seed_recipe))
    monkeypatch.setattr(sweep, "load_params", lambda: params)
    monkeypatch.setattr(sys, "argv", ["sweep", "scratch", "2"])
    sweep.main()  # the curve's point, whose lr the protocol's changes take
    monkeypatch.setattr(collapse, "load_params", lambda: params)
    collapse.main()
    summary = json.loads(collapse.OUTPUT.read_text())
    assert summary["order"] == list(scratch_arm.TOWARD_PROTOCOL) and summary["protocol_lr"] in (0.001, 0.003)
    seed, changes = summary["changes"]["seed"]["recipe"], summary["changes"]
    assert seed["optimizer"] == "adam" and seed["weight_decay"] == params.train_scratch.paper.weight_decay
    for name, change in changes.items():  # one setting differs from seed 000's, or (protocol) every one
        differs = {key for key, value in change["recipe"].items() if value != seed[key]}
        assert differs == {
            "seed": set(), "decoupled_decay": {"optimizer", "weight_decay"}, "lr": {"lr"},
            "warmup": {"warmup_fraction"}, "clipping": {"grad_clip"}, "plateau_steps": {"validation_rule"},
            "augment": {"augment"},
            "protocol": {"optimizer", "weight_decay", "lr", "warmup_fraction", "grad_clip", "validation_rule",
                         "augment"},
        }[name] - ({"lr"} if summary["protocol_lr"] == seed["lr"] else set()), name  # fmt: skip
    for name, runs in summary["runs"].items():
        assert set(runs) == {"test_acc", "test_loss", "val_acc", "val_loss", "steps", "collapse"}
        assert (
            all(a * 6 == round(a * 6) for a in runs["test_acc"]["per_seed"]) and len(runs["test_acc"]["per_seed"]) == 2
        )
        if name != "seed":  # paired by seed against seed 000's recipe
            d, a, b = summary["against_seed"][name], runs["test_acc"]["per_seed"], summary["runs"]["seed"]["test_acc"]
            assert d["per_seed"] == pytest.approx([x - y for x, y in zip(a, b["per_seed"], strict=True)])
    epochs = 2 * -(-summary["n_train"] // 8)  # 2 epochs at batch 8
    assert summary["runs"]["seed"]["steps"]["per_seed"] == [epochs, epochs]
    # the protocol's run is the curve's own: the same seed's subset, lr, budget and validation rule
    point = json.loads(curve.point_path("scratch", 2).read_text())
    if summary["protocol_lr"] == point["lr"]:
        assert summary["runs"]["protocol"]["test_acc"]["per_seed"] == point["test_acc"]["per_seed"]
