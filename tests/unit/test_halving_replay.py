"""benchmarks/halving_replay.py: successive halving of the choice seeds and a monitor, replayed on point files."""

import json
from pathlib import Path

import pytest
from helpers import benchmark_module

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def halving():
    return benchmark_module("halving_replay")


def seeds(*accs: float) -> dict:
    return {str(seed): {"val_acc": acc, "val_loss": 1 - acc} for seed, acc in enumerate(accs)}


def trial(*accs: float, pruned: bool = False) -> dict:
    mean = sum(accs) / len(accs)
    return {"val_acc": mean, "val_loss": 1 - mean, "seeds": seeds(*accs), "pruned": pruned}


def point(chosen: float) -> dict:
    # 0.01 leads on seed 0 but 0.001's mean over seeds 0-2 is best; 0.1 is third on seed 0
    trials = {"0.001": trial(0.70, 0.80, 0.80), "0.01": trial(0.75, 0.70, 0.70), "0.1": trial(0.72, 0.71, 0.71),
              "0.3": trial(0.50, pruned=True)}  # fmt: skip
    runs = {str(seed): {"curve": [{}] * 4} for seed in range(5)}
    return {"lr_trials": trials, "lr": chosen, "runs": runs, "n_val": 1500}


def test_halving_keeps_the_first_seeds_best_and_counts_one_run_for_each_rate_it_stops(halving):
    cell = point(0.001)
    assert halving.replay(cell, 3) == {"chosen": 0.001, "same_choice": True, "runs": 3 + 3 + 3 + 1 + 2}
    # keep 2: 0.001 (third on seed 0) trains no further seed, so 0.01 (mean 0.717) beats 0.1 (0.713)
    assert halving.replay(cell, 2) == {"chosen": 0.01, "same_choice": False, "runs": 1 + 3 + 3 + 1 + 2}
    assert halving.replay(cell, 1) == {"chosen": 0.01, "same_choice": False, "runs": 1 + 3 + 1 + 1 + 2}


def test_a_monitor_scores_its_images_at_each_record_and_the_whole_split_once_a_run(halving):
    assert halving.monitor_images(point(0.001), 300) == {"now": 5 * 4 * 1500, "monitored": 5 * 4 * 300 + 5 * 1500}


def test_the_committed_replay_is_what_the_tool_prints_from_the_committed_point_files(halving, monkeypatch):
    committed = json.loads((ROOT / "metrics" / "halving_replay.json").read_text())
    monkeypatch.chdir(ROOT)
    for folder in ("metrics/data_hunger", "metrics/replication"):
        assert halving.folder_replay(Path(folder), committed["classes"]) == committed[folder]
    # the replay's run count is the accounting's (benchmarks/compute_accounting.py)
    accounting = json.loads((ROOT / "metrics" / "compute_accounting.json").read_text())
    assert committed["metrics/data_hunger"]["totals"]["runs_now"] == accounting["totals"]["after"]["runs"]
