"""benchmarks/pruning_pilot.py: the replay of a sweep's choice with a check inside its runs."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import pruning_pilot as pilot  # noqa: E402  (benchmarks/ is no package)


def run(seed: int, lr: float, accuracies: list[float], wall: float = 100.0) -> dict:
    """A run scored every 10 steps, its validation accuracy at each score."""
    return {"seed": seed, "lr": lr, "val_acc": {10 * i: a for i, a in enumerate(accuracies)},
            "steps": 10 * (len(accuracies) - 1), "wall_time_s": wall}  # fmt: skip


def cell(scores: dict[float, dict[int, float]], chosen: float) -> dict:
    """A point file's fields the replay reads: 1,500 validation images, a budget of 40 steps."""
    trials = {f"{lr:g}": {"seeds": {str(s): {"val_acc": a, "val_loss": 1 - a} for s, a in by_seed.items()}}
              for lr, by_seed in scores.items()}  # fmt: skip
    return {"lr": chosen, "lr_trials": trials, "n_val": 1500, "budget": 40}


GOOD, BAD = [0.3, 0.5, 0.6, 0.7, 0.7], [0.3, 0.35, 0.4, 0.42, 0.45]
POINT = cell({0.001: {0: 0.7, 1: 0.7, 2: 0.7}, 0.01: {0: 0.45, 1: 0.45, 2: 0.45}}, chosen=0.001)
RUNS = [run(0, 0.001, GOOD), run(0, 0.01, BAD), run(1, 0.001, GOOD), run(1, 0.01, BAD), run(2, 0.001, GOOD),
        run(2, 0.01, BAD), run(3, 0.001, GOOD)]  # fmt: skip


def test_without_a_check_the_replay_gives_the_sweeps_choice_and_saves_nothing():
    result = pilot.replay(POINT, RUNS, None, 0.0, prune_z=0.0)
    assert result["same_choice"] and result["stopped"] == [] and result["saved_s"] == 0
    assert result["total_s"] == 700


def test_a_rate_far_behind_at_the_check_stops_there_and_trains_no_further_seed():
    result = pilot.replay(POINT, RUNS, 0.5, 3.0, prune_z=0.0)
    assert result["stopped"] == [{"lr": 0.01, "seed": 0, "step": 20}]
    assert result["saved_s"] == pytest.approx(100 * (1 - 20 / 40) + 2 * 100)  # its rest, its two later seeds
    assert result["same_choice"]


def test_in_the_order_they_ran_the_first_rate_is_never_stopped_and_interleaved_it_is():
    reordered = [run(0, 0.01, BAD), run(0, 0.001, GOOD)]
    point = cell({0.001: {0: 0.7}, 0.01: {0: 0.45}}, chosen=0.001)
    assert pilot.replay(point, reordered, 0.5, 3.0, prune_z=0.0)["stopped"] == []
    assert pilot.replay(point, reordered, 0.5, 3.0, prune_z=0.0, interleaved=True)["stopped"] == [
        {"lr": 0.01, "seed": 0, "step": 20}
    ]


def test_a_check_that_stops_the_sweeps_choice_changes_the_choice():
    late_bloomer = [0.3, 0.32, 0.34, 0.9, 0.9]  # behind at the check, best at the end
    point = cell({0.001: {0: 0.7}, 0.01: {0: 0.9}}, chosen=0.01)
    result = pilot.replay(point, [run(0, 0.001, GOOD), run(0, 0.01, late_bloomer)], 0.5, 2.0, prune_z=0.0)
    assert result["chosen"] == 0.001 and not result["same_choice"]


def test_a_stricter_seed_zero_pruning_spares_the_further_seeds_of_each_rate_it_drops():
    close = cell({0.001: {0: 0.70, 1: 0.7, 2: 0.7}, 0.01: {0: 0.67, 1: 0.66, 2: 0.66}}, chosen=0.001)
    margin = 0.03 / (2**0.5 * pilot.accuracy_se(0.70, 1500))  # the gap in standard errors of a difference: 1.6
    assert pilot.replay(close, RUNS, None, 0.0, prune_z=margin + 0.1)["saved_s"] == 0
    result = pilot.replay(close, RUNS, None, 0.0, prune_z=margin - 0.1)
    assert result["saved_s"] == 200 and result["same_choice"]  # seeds 1 and 2 at 0.01
