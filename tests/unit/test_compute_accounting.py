"""benchmarks/compute_accounting.py: the training runs, steps and scored images a protocol's point files imply."""

import json
from pathlib import Path

import pytest
from helpers import benchmark_module

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def accounting():
    return benchmark_module("compute_accounting")


def point(trials: dict, lr: float, steps: list[int], scores: int, n_train: int = 30, n_val: int = 1500) -> dict:
    runs = {str(i): {"steps": s, "curve": [{}] * scores} for i, s in enumerate(steps)}
    return {"lr_trials": trials, "lr": lr, "runs": runs, "n_train": n_train, "n_val": n_val, "n_train_per_class": 10}


def test_issue_37s_choice_counts_each_candidates_seeds_and_the_chosen_rates_other_seeds_once(accounting):
    trials = {"0.001": {"seeds": ["0", "1", "2"]}, "0.003": {"seeds": ["0"], "pruned": True}, "0.01": {"seeds": ["0"]}}
    assert accounting.sweep_runs(point(trials, 0.001, [100] * 5, 11)) == 3 + 1 + 1 + 2  # seeds 3 and 4 at 0.001


def test_issue_21s_choice_on_the_first_seed_is_one_run_a_candidate(accounting):
    trials = {"0.0003": {"val_acc": 0.5}, "0.001": {"val_acc": 0.6}, "0.003": {"val_acc": 0.4}}
    assert accounting.sweep_runs(point(trials, 0.001, [100] * 5, 11)) == 3 + 4


def test_a_cells_counts_take_the_last_smaller_batch_of_an_epoch_into_account(accounting):
    counts = accounting.cell_counts(point({"0.001": {"seeds": ["0"]}}, 0.001, [8, 4], 3, n_train=225, n_val=300), 64)
    # 225 images are 4 steps an epoch (64, 64, 64, 33): 12 steps took 3 epochs' images
    assert counts == {"runs": 2, "kept_steps": 12, "train_images": 675, "val_images": 2 * 3 * 300}


def test_a_run_with_a_monitor_scores_it_at_each_record_and_the_whole_split_once(accounting):
    cell = point({"0.001": {"seeds": ["0"]}}, 0.001, [8, 4], 3, n_train=225, n_val=1500) | {"n_monitor": 300}
    assert accounting.cell_counts(cell, 64)["val_images"] == 2 * 3 * 300 + 2 * 1500


def test_the_committed_accounting_is_what_the_tool_prints_from_the_committed_point_files(accounting):
    committed = json.loads((ROOT / "metrics" / "compute_accounting.json").read_text())
    batch = accounting.batch_size((ROOT / "params.yaml").read_text())
    after = {f"{arm}_{p}.json": json.loads((ROOT / "metrics" / "data_hunger" / f"{arm}_{p}.json").read_text())
             for arm in accounting.ARMS for p in accounting.POINTS}  # fmt: skip
    for cell, counts in committed["cells"].items():
        arm, per_class = cell.split("@")
        name = next(n for n, d in after.items() if n.startswith(arm + "_") and d["n_train_per_class"] == int(per_class))
        assert accounting.cell_counts(after[name], batch) == counts["after"]
    assert committed["totals"]["ratio"] == accounting.ratios(
        committed["totals"]["after"], committed["totals"]["before"]
    )
