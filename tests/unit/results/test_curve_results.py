"""pipeline.results.curve_results: the sweep's point files gathered into one table per arm and size, and its CSVs."""

from __future__ import annotations

import json

import pytest

from pipeline.core.errors import UserError
from pipeline.results import curve_results


def point(n: int, accuracies: list[float], **extra) -> dict:
    mean = sum(accuracies) / len(accuracies)
    return {"n_train_per_class": n, "test_acc": {"mean": mean, "std": 0.0, "per_seed": accuracies},
            "trained_parameters": 7, "n_test": 30, "n_val": 6, **extra}  # fmt: skip


def test_aggregate_keys_each_arm_by_size_and_keeps_the_run_summary_only():
    summaries = {"scratch": [point(1, [0.3, 0.5], lr=0.001, best_step=4, curve=[1]), point(2, [0.6, 0.6], lr=0.003)]}
    result = curve_results.aggregate(summaries, {"1": {"chance": 1 / 3}})
    assert result["scratch"]["1"]["per_seed"] == [0.3, 0.5] and result["scratch"]["2"]["mean"] == pytest.approx(0.6)
    assert result["runs"]["scratch"]["1"] == {"lr": 0.001, "best_step": 4}  # "curve" is no run summary key
    assert (result["n_test"], result["n_val"], result["trained_parameters"]) == (30, 6, {"scratch": 7})


def plateau_run(decay_step: int | None, last_step: int = 290) -> dict:
    curve = [{"step": 0, "train_loss": None, "val_loss": 1.0}]  # step 0 is scored: it counts in the first window
    curve += [{"step": step, "train_loss": 0.5, "val_loss": 0.9} for step in range(10, last_step + 1, 10)]
    return {"decay_step": decay_step, "curve": curve}


def test_a_run_is_at_the_floor_only_where_its_cooldown_began_at_the_first_score_the_rule_allows():
    """windows of 10 scores, a score every 10 steps from step 0: the 20th score, step 190, is the earliest a
    cooldown can begin (the committed curve's 22 runs that stop at step 230 = 190 + a fifth of it)."""
    assert curve_results.stopped_at_floor(plateau_run(190), window=10)
    assert not curve_results.stopped_at_floor(plateau_run(200), window=10)
    assert not curve_results.stopped_at_floor(plateau_run(None), window=10)  # the cap came first
    assert not curve_results.stopped_at_floor(plateau_run(90, last_step=100), window=10)  # fewer than 20 scores
    assert curve_results.stopped_at_floor(plateau_run(90), window=5)
    runs = {"0": plateau_run(190), "1": plateau_run(250), "2": plateau_run(190)}
    summaries = {"scratch": [point(1, [0.3, 0.5, 0.4], lr=0.001, stopped_at_cap=0, runs=runs)],
                 "pixels": [point(1, [0.3, 0.5, 0.4], reg=[1.0] * 3, runs={"0": {}, "1": {}, "2": {}})]}  # fmt: skip
    result = curve_results.aggregate(summaries, {}, window=10)
    assert result["runs"]["scratch"]["1"]["stopped_at_floor"] == 2
    assert "stopped_at_floor" not in result["runs"]["pixels"]["1"]  # a probe has no stopping rule
    assert "stopped_at_floor" not in curve_results.aggregate(summaries, {})["runs"]["scratch"]["1"]


def test_curve_csv_sorts_sizes_as_numbers_and_adds_the_pixel_regression_where_it_ran():
    metrics = {"scratch": {"10": {"mean": 0.5, "std": 0.1}, "2": {"mean": 0.4, "std": 0.0}},
               "baselines": {"2": {"pixels_logreg": 0.45}, "10": {"chance": 0.33}}}  # fmt: skip
    rows = curve_results.curve_csv(metrics, ["scratch"]).splitlines()
    assert rows == ["arm,n_train_per_class,test_acc,test_acc_std", "scratch,2,0.4,0", "scratch,10,0.5,0.1",
                    "pixels_logreg,2,0.45,0"]  # fmt: skip


def test_validation_csv_leaves_step_zeros_training_loss_empty():
    run = {"lr": 0.001, "curve": [{"step": 0, "train_loss": None, "val_loss": 1.1, "val_acc": 0.3}]}
    text = curve_results.validation_csv({"cnn": [{"n_train_per_class": 5, "runs": {"0": run}}]})
    assert text.splitlines()[1] == "cnn,5,0,0.001,0,,1.1,0.3"


def test_read_points_names_a_missing_point_file_and_the_command_that_makes_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = curve_results.point_path("scratch", 0)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(point(1, [0.5])))
    assert curve_results.read_points([0], arms=["scratch"])["scratch"][0]["n_train_per_class"] == 1
    with pytest.raises(UserError, match=r"scratch_1\.json is missing; run `dvc repro`"):
        curve_results.read_points([0, 1], arms=["scratch"])
