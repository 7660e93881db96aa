"""benchmarks/floor_check.py: which cells the plateau rule's floor may have decided, read from data_hunger.json."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

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


def scored_run(val_acc: float, decay_step: int, steps: int = 40) -> dict:
    """A plateau run's record: scored every 10 steps from step 0, its cooldown begun at ``decay_step``."""
    curve = [{"step": step, "val_loss": 1.0, "val_acc": val_acc} for step in range(0, steps + 1, 10)]
    return {"val_acc": val_acc, "val_loss": 1.0, "best_step": 10, "steps": steps, "decay_step": decay_step,
            "stopped_at_cap": False, "curve": curve}  # fmt: skip


def test_the_candidate_rule_chooses_as_the_sweeps_do_and_never_scores_the_test_set():
    """Window 1: the floor is the second score (step 10). The better rate's runs end past it; the pruned one's
    first run at it. The test set is not scored (``score`` would fail the test)."""
    from types import SimpleNamespace

    def run_seed(curve, data, seed, lr):
        accuracy = {0.001: 0.60, 0.01: 0.40}[lr] + 0.001 * seed
        return scored_run(accuracy, decay_step=10 if lr == 0.01 else 30) | {"score": lambda: pytest.fail("tested")}

    config = SimpleNamespace(plateau_window=1, plateau_score="accuracy", choice_seeds=3, prune_z=3.0)
    curve = SimpleNamespace(config=config)
    data = SimpleNamespace(val=[0] * 1500)
    result = floor_check.candidate_choice(SimpleNamespace(run_seed=run_seed), curve, data, [0, 1, 2, 3, 4],
                                          [0.001, 0.01])  # fmt: skip
    assert (result["lr"], result["at_floor"], result["steps"]) == (0.001, 0, [40, 40, 40])
    assert result["val_acc"] == pytest.approx(0.601)
    assert sorted(result["trials"]["0.001"]["seeds"]) == ["0", "1", "2"]
    assert result["trials"]["0.01"]["pruned"] and list(result["trials"]["0.01"]["seeds"]) == ["0"]
    assert result["trials"]["0.01"]["seeds"]["0"]["at_floor"]


def test_the_committed_rules_choice_is_read_from_its_point_file():
    point = {"lr": 0.001, "runtime": "cpu fp32 (AVX2, no native bf16)",
             "lr_trials": {"0.001": {"val_acc": 0.52}, "0.0003": {"val_acc": 0.49}},
             "runs": {str(seed): scored_run(0.5, decay_step=10 if seed < 2 else 20) for seed in range(5)}}  # fmt: skip
    committed = floor_check.reference_choice(point, window=1, choice_seeds=[0, 1, 2])
    assert (committed["lr"], committed["val_acc"], committed["at_floor"]) == (0.001, 0.52, 2)


@pytest.mark.parametrize(("passes", "unchecked", "verdict"), [
    ([True, True], [], "adopt"),
    ([True, True], [("finetune", "10")], "incomplete"),
    ([True, False], [("finetune", "10")], "keep loss"),
    ([], [("finetune", "10")], "incomplete"),
])  # fmt: skip
def test_the_candidate_is_adopted_only_where_every_floor_cell_was_checked_and_passed(passes, unchecked, verdict):
    from types import SimpleNamespace

    runtime = SimpleNamespace(describe=lambda: "cpu fp32 (AVX2, no native bf16)")
    cells = [{"passes": ok} for ok in passes]
    document = floor_check.rule_document(runtime, cells, [(arm, n, "why") for arm, n in unchecked])
    assert (document["verdict"], document["passed"], document["of"]) == (verdict, sum(passes), len(passes))
    if verdict == "adopt":  # a partial file, written while a cell still runs, never says adopt
        assert floor_check.rule_document(runtime, cells, [], pending=1)["verdict"] == "incomplete"


def test_each_cells_committed_rule_comes_from_this_cpu_kind_and_precision(tmp_path):
    """The committed run's own point file where it ran here (the bf16 probe's ratio aside), else the cross-kind
    rerun's; none where neither did."""
    import json

    committed, rerun = tmp_path / "committed", tmp_path / "rerun"
    for folder, runtimes in ((committed, {"scratch_0": "cpu bf16 (AVX512, native bf16: avx512_bf16 (step 1.73x))",
                                          "finetune_0": "cpu fp32 (AVX2, no native bf16)",
                                          "cnn_0": "cpu bf16 (AVX512, native bf16: avx512_bf16 (step 1.73x))"}),
                             (rerun, {"scratch_0": "cpu fp32 (AVX2, no native bf16)"})):  # fmt: skip
        folder.mkdir()
        for name, runtime in runtimes.items():
            (folder / f"{name}.json").write_text(json.dumps({"runtime": runtime}))
    here = "cpu fp32 (AVX2, no native bf16)"
    assert floor_check.same_kind_reference([committed, rerun], "scratch_0.json", here) == rerun / "scratch_0.json"
    assert floor_check.same_kind_reference([committed, rerun], "finetune_0.json", here) == committed / "finetune_0.json"
    assert floor_check.same_kind_reference([committed, rerun], "cnn_0.json", here) is None
    zen4 = "cpu bf16 (AVX512, native bf16: avx512_bf16 (step 1.61x))"
    assert floor_check.same_kind_reference([committed, rerun], "cnn_0.json", zen4) == committed / "cnn_0.json"


def test_each_kept_run_at_the_floor_is_trained_again_at_its_rate_under_both_floors():
    """Windows of 2 scores (committed): the floor is step 30; of 1 (lower): step 10, which the lower run passes
    (its cooldown begins at step 20). Seed 3's kept run began its cooldown at the floor, seed 4's did not; only
    seed 3 trains, at the committed rate, once per floor, and its test score is read once per floor."""
    from types import SimpleNamespace

    calls = []

    def run_seed(curve, data, seed, lr):
        calls.append((curve.config.plateau_window, seed, lr))
        lower = curve.config.plateau_window == 1
        run = scored_run(0.62 if lower else 0.60, decay_step=20 if lower else 30)
        return run | {"score": lambda: {"test_acc": 0.59 if lower else 0.58}}

    committed = {"lr": 0.003, "runs": {
        "3": scored_run(0.60, decay_step=30) | {"test_acc": 0.58}, "4": scored_run(0.70, decay_step=40)}}  # fmt: skip
    curves = tuple(SimpleNamespace(config=SimpleNamespace(plateau_window=w)) for w in (2, 1))
    runs = floor_check.floor_runs(SimpleNamespace(run_seed=run_seed), curves, None, committed, [0, 1, 2])
    assert calls == [(2, 3, 0.003), (1, 3, 0.003)]
    (run,) = runs
    assert (run["seed"], run["choice_seed"], run["exact"]) == (3, False, True)
    assert run["again"]["at_floor"] and not run["lower"]["at_floor"]
    assert run["val_change"] == pytest.approx(0.02) and run["test_change"] == pytest.approx(0.01)
    assert floor_check.floor_runs(SimpleNamespace(run_seed=run_seed), curves, None, committed, [3])[0]["choice_seed"]
