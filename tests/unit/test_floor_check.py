"""benchmarks/floor_check.py: which cells the plateau rule's floor may have decided, read from data_hunger.json."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import floor_check  # noqa: E402


def test_the_cells_checked_are_the_trained_arms_sizes_with_a_kept_run_at_the_floor():
    curve = {"runs": {
        "scratch": {"10": {"stopped_at_floor": 5}, "25": {"stopped_at_floor": 0}},
        "cnn": {"75": {"stopped_at_floor": 1}},
        "pixels": {"10": {"reg": [1.0]}},  # a probe has no floor
        "finetune": {"10": {"stopped_at_cap": 0}},  # written before stopped_at_floor existed
    }}  # fmt: skip
    assert floor_check.floor_cells(curve) == [("scratch", "10"), ("cnn", "75")]


def test_the_summary_counts_choices_held_and_what_the_lower_floor_did_to_each_runs_validation_score():
    def trials(*runs):
        return {f"{lr:g}": {"val_acc": acc, "at_floor": floor} for lr, acc, floor in runs}

    cells = [
        {"choice_holds": True, "committed": {"trials": trials((0.001, 0.6, True), (0.01, 0.5, True))},
         "lower": {"trials": trials((0.001, 0.55, True), (0.01, 0.5, False))}},
        {"choice_holds": False, "committed": {"trials": trials((0.001, 0.7, False))},
         "lower": {"trials": trials((0.001, 0.72, True))}},
    ]  # fmt: skip
    assert floor_check.summary(cells) == {"choice_holds": 1, "of": 2, "runs": 3, "val_acc_lower": 1,
                                          "val_acc_higher": 1, "at_floor": {"committed": 2, "lower": 2}}  # fmt: skip
