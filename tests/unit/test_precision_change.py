"""benchmarks/precision_change.py: a second run's verdicts held against the committed run's, and a replication's
(fresh seeds) pooled with it."""

from __future__ import annotations

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
