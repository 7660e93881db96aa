"""benchmarks/precision_change.py: a second run's verdicts held against the committed run's, and a replication's
(fresh seeds) pooled with it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import precision_change  # noqa: E402

from pipeline.results.stats import paired_difference  # noqa: E402


def point(arm: str, seeds: list[int], accuracies: list[float]) -> dict:
    return {"arm": arm, "n_train_per_class": 75, "runtime": "cpu", "runs": {str(s): {} for s in seeds},
            "test_acc": {"mean": sum(accuracies) / len(accuracies), "per_seed": accuracies}}  # fmt: skip


def test_a_replication_with_fresh_seeds_pools_both_runs_per_comparison_and_counts_flips():
    reference = {"75": {"finetune": point("finetune", [0, 1, 2], [0.70, 0.71, 0.72]),
                        "scratch": point("scratch", [0, 1, 2], [0.60, 0.62, 0.61])}}  # fmt: skip
    replication = {"75": {"finetune": point("finetune", [5, 6, 7], [0.60, 0.61, 0.60]),
                          "scratch": point("scratch", [5, 6, 7], [0.70, 0.72, 0.71])}}  # fmt: skip
    result = precision_change.compare_runs(reference, replication)
    pair = result["comparisons"]["75"]["finetune-scratch"]
    assert (pair["reference"]["verdict"], pair["other"]["verdict"]) == ("ahead", "behind")
    assert result["flipped"] == 1 and result["held"] == 0
    expected = paired_difference([0.70, 0.71, 0.72, 0.60, 0.61, 0.60], [0.60, 0.62, 0.61, 0.70, 0.72, 0.71])
    assert pair["pooled"]["mean"] == pytest.approx(expected["mean"]) and pair["pooled"]["low"] == expected["low"]
    rerun = precision_change.compare_runs(reference, reference)  # the same seeds again: nothing to pool
    assert "pooled" not in rerun["comparisons"]["75"]["finetune-scratch"] and rerun["flipped"] == 0
    assert rerun["held"] == rerun["compared"] == 1


def test_each_trained_arms_chosen_rate_is_set_beside_the_other_runs_with_its_margin():
    def trained(arm: str, lr: float, scores: dict[str, float]) -> dict:
        return point(arm, [0], [0.7]) | {"lr": lr, "lr_trials": {k: {"val_acc": v} for k, v in scores.items()}}

    pixels = point("pixels", [0], [0.6])
    reference = {"10": {"cnn": trained("cnn", 0.03, {"0.01": 0.57, "0.03": 0.58}), "pixels": pixels},
                 "75": {"cnn": trained("cnn", 0.01, {"0.01": 0.73, "0.03": 0.70})}}  # fmt: skip
    other = {"10": {"cnn": trained("cnn", 0.01, {"0.01": 0.59, "0.03": 0.56}), "pixels": pixels},
             "75": {"cnn": trained("cnn", 0.01, {"0.01": 0.74, "0.03": 0.69})}}  # fmt: skip
    result = precision_change.compare_runs(reference, other)
    assert result["same_learning_rate"] == "1 of 2"  # the pixel probe chooses no rate
    cell = result["learning_rates"]["cnn"]["10"]
    assert (cell["reference"], cell["other"], cell["same"]) == (0.03, 0.01, False)
    assert cell["margin"]["reference"] == pytest.approx(0.01) and cell["margin"]["other"] == pytest.approx(0.03)


def test_a_runs_stage_files_are_read_from_beside_its_points_or_above_a_metrics_trees_data_hunger(tmp_path):
    """The rerun held against the run before it (both point folders named data_hunger in a metrics tree) compares
    their pretraining axes too; a second run's own folder keeps its stage files beside its points."""
    for run, accuracy in (("before", 0.55), ("rerun", 0.53)):
        (tmp_path / run / "data_hunger").mkdir(parents=True)
        arms = {arm: {"test_acc": {"mean": accuracy}} for arm in ("scratch", "linear")}
        (tmp_path / run / "evaluate.json").write_text(json.dumps(arms))
    rerun, before = tmp_path / "rerun" / "data_hunger", tmp_path / "before" / "data_hunger"
    assert precision_change.stage_folder(rerun) == tmp_path / "rerun"
    assert precision_change.stage_folder(tmp_path / "second_run") == tmp_path / "second_run"
    stages = precision_change.stage_folder
    change = precision_change.compare_stages(stages(rerun), stages(before))
    assert change["seed000"]["linear"]["change"] == pytest.approx(-0.02)
