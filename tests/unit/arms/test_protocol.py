"""pipeline.arms.protocol: what every arm of the curve shares: the grid-edge flag, the learning-rate choice and the
validation images a run scores."""

from __future__ import annotations

import pytest
from helpers import CPU, tiny_params

from pipeline.arms import cnn as cnn_arm
from pipeline.arms import protocol
from pipeline.arms.protocol import Curve, at_edge, choose_lr, point_summary
from pipeline.core.errors import UserError
from pipeline.train.loop import evaluate


def test_a_choice_at_either_end_of_its_grid_is_flagged_and_a_one_value_grid_never():
    grid = [0.0001, 0.001, 0.01]
    assert [at_edge(lr, grid) for lr in grid] == ["low", "", "high"]
    assert at_edge(0.001, [0.001]) == ""


def test_the_lr_is_the_best_validation_accuracy_then_loss_and_of_equals_the_first():
    def run(acc: float, loss: float) -> dict:
        return {"val_acc": acc, "val_loss": loss}

    candidates = [(run(0.5, 0.8), "a"), (run(0.6, 1.0), "b"), (run(0.6, 0.9), "c"), (run(0.6, 0.9), "d")]
    assert choose_lr(candidates)[1] == "c"  # accuracy first, the loss breaking the tie, then the smaller lr
    assert choose_lr([(run(0.5, float("nan")), "nan"), (run(0.4, 1.0), "finite")])[1] == "finite"
    assert choose_lr(candidates[:1])[1] == "a"


def test_a_plateau_run_may_train_past_its_budget_to_cap_factor_budgets_and_records_where_its_decay_began(
    curve_project,
):
    from helpers import CPU, tiny_params

    from pipeline.arms import scratch as scratch_arm
    from pipeline.arms.protocol import Curve

    params = tiny_params(scratch={"schedule": "plateau"}, cap_factor=5, scores=6, patience=1)
    curve_ = Curve("paper", "tiny", "tiny", "supervised", params.data_hunger, 8, CPU)
    data_ = scratch_arm.point_data(curve_, 2)
    run = scratch_arm.run_seed(curve_, data_, 0, 0.001)
    assert (run["budget"], run["cap"]) == (6, 30)  # min_steps 6, five budgets
    assert run["steps"] <= 30 and run["stopped_at_cap"] == (run["steps"] == 30)
    steps = [r["step"] for r in run["curve"]]
    assert steps == list(range(0, run["steps"] + 1))  # a score every step (6 scores a budget of 6)
    if not run["stopped_at_cap"]:  # the decay began on a score and ran a whole number of scores, to the end
        assert run["decay_step"] in steps and run["steps"] > run["decay_step"]
    cosine_params = tiny_params(scratch={"schedule": "cosine"}).data_hunger
    cosine = scratch_arm.run_seed(Curve("paper", "tiny", "tiny", "supervised", cosine_params, 8, CPU), data_, 0, 0.001)
    assert "cap" not in cosine and "decay_step" not in cosine and cosine["budget"] == 6


class FakeRuns:
    """``run(seed, lr)`` for seed_protocol without training: the validation accuracy a table gives, a test score
    that records being read, and every call in order."""

    def __init__(self, val_acc: dict[tuple[int, float], float]):
        self.val_acc, self.calls, self.scored = val_acc, [], []

    def __call__(self, seed: int, lr: float | None) -> tuple[dict, object]:
        self.calls.append((seed, lr))
        acc = self.val_acc[(seed, lr)]

        def score() -> dict:
            self.scored.append((seed, lr))
            return {"test_acc": acc}

        return {"lr": lr, "val_acc": acc, "val_loss": 1 - acc, "score": score}, Tracker()


class Tracker:
    def log_metrics(self, metrics: dict) -> None:
        pass


def table(by_lr: dict[float, list[float]]) -> dict[tuple[int, float], float]:
    return {(seed, lr): acc for lr, accs in by_lr.items() for seed, acc in enumerate(accs)}


def test_with_three_choice_seeds_the_best_mean_chooses_its_runs_are_kept_and_only_the_other_seeds_train_again():
    from pipeline.arms.protocol import Choice, seed_protocol

    # seed 0 alone would choose 0.01 (0.80); the mean over seeds 0-2 chooses 0.001 (0.76 against 0.70)
    runs = FakeRuns(table({0.001: [0.78, 0.75, 0.75, 0.7, 0.7], 0.01: [0.80, 0.65, 0.65, 0.6, 0.6]}))
    kept, trials = seed_protocol(runs, [0.001, 0.01], [0, 1, 2, 3, 4], Choice(seeds=3, prune_z=0.0, n_val=1500))
    assert {seed: run["lr"] for seed, run in kept.items()} == dict.fromkeys(range(5), 0.001)
    assert sorted(runs.calls) == sorted([(s, lr) for s in (0, 1, 2) for lr in (0.001, 0.01)] + [(3, 0.001), (4, 0.001)])
    assert sorted(runs.scored) == [(s, 0.001) for s in range(5)]  # the test set: kept runs only, once each
    assert trials["0.001"]["val_acc"] == pytest.approx(0.76) and trials["0.01"]["val_acc"] == pytest.approx(0.70)
    assert set(trials["0.01"]["seeds"]) == {"0", "1", "2"} and trials["0.01"]["pruned"] is False


def test_a_candidate_far_behind_on_the_first_seed_is_pruned_before_its_other_choice_seeds():
    from pipeline.arms.protocol import Choice, accuracy_se, pruned, seed_protocol

    # 1,500 validation images at 0.80: one accuracy's standard error 1.03 points, a difference's 1.46; z 3: 4.4
    assert accuracy_se(0.8, 1500) == pytest.approx(0.01033, abs=1e-5)
    first = {0.001: {"val_acc": 0.80}, 0.01: {"val_acc": 0.76}, 0.1: {"val_acc": 0.75}}
    assert pruned(first, 1500, 3.0) == {0.1} and pruned(first, 1500, 0.0) == set()
    runs = FakeRuns(table({0.001: [0.80, 0.7, 0.7], 0.01: [0.76, 0.75, 0.75], 0.1: [0.75, 0.9, 0.9]}))
    kept, trials = seed_protocol(runs, [0.001, 0.01, 0.1], [0, 1, 2], Choice(seeds=3, prune_z=3.0, n_val=1500))
    assert (1, 0.1) not in runs.calls and (2, 0.1) not in runs.calls  # pruned: its better later seeds never ran
    assert trials["0.1"]["pruned"] is True and set(trials["0.1"]["seeds"]) == {"0"}
    assert {run["lr"] for run in kept.values()} == {0.01}  # mean 0.753 against 0.733


def test_one_choice_seed_is_the_first_seed_rule_and_writes_the_trials_as_before():
    from pipeline.arms.protocol import Choice, seed_protocol

    runs = FakeRuns(table({0.001: [0.5, 0.9], 0.01: [0.6, 0.1]}))
    kept, trials = seed_protocol(runs, [0.001, 0.01], [0, 1], Choice(seeds=1, prune_z=3.0, n_val=6))
    assert runs.calls == [(0, 0.001), (0, 0.01), (1, 0.01)]
    assert trials == {"0.001": {"val_acc": 0.5, "val_loss": 0.5}, "0.01": {"val_acc": 0.6, "val_loss": 0.4}}
    probe = FakeRuns({(0, None): 0.5, (1, None): 0.6})
    kept, trials = seed_protocol(probe, [None], [0, 1], Choice(seeds=2, prune_z=3.0, n_val=6))
    assert probe.calls == [(0, None), (1, None)] and trials == {} and set(kept) == {0, 1}


def test_successive_halving_trains_only_the_first_seeds_best_on_the_other_choice_seeds():
    from pipeline.arms.protocol import Choice, beyond_best, seed_protocol

    first = {0.0003: {"val_acc": 0.70, "val_loss": 0.9}, 0.001: {"val_acc": 0.74, "val_loss": 0.8},
             0.003: {"val_acc": 0.74, "val_loss": 0.7}, 0.01: {"val_acc": 0.72, "val_loss": 0.6}}  # fmt: skip
    # accuracy first, the loss breaking the tie at 0.74
    assert beyond_best(first, 2) == {0.0003, 0.01} and beyond_best(first, 1) == {0.0003, 0.001, 0.01}
    assert beyond_best(first, 0) == set() and beyond_best(first, 4) == set()
    tied = {0.001: {"val_acc": 0.7, "val_loss": 0.5}, 0.01: {"val_acc": 0.7, "val_loss": 0.5}}
    assert beyond_best(tied, 1) == {0.01}  # of equals the smaller rate stays, as choose_lr breaks ties
    # 0.1 is third on seed 0, so its better later seeds never run; prune_z alone would keep it (1.2 points behind)
    runs = FakeRuns(table({0.001: [0.80, 0.7, 0.7], 0.01: [0.79, 0.75, 0.75, 0.7], 0.1: [0.788, 0.9, 0.9]}))
    kept, trials = seed_protocol(
        runs, [0.001, 0.01, 0.1], [0, 1, 2, 3], Choice(seeds=3, prune_z=3.0, n_val=1500, keep=2)
    )
    assert sorted(runs.calls) == sorted([(0, 0.001), (0, 0.01), (0, 0.1), (1, 0.001), (2, 0.001), (1, 0.01),
                                         (2, 0.01), (3, 0.01)])  # fmt: skip
    assert trials["0.1"]["pruned"] is True and set(trials["0.1"]["seeds"]) == {"0"}
    assert {run["lr"] for run in kept.values()} == {0.01}


def test_with_one_choice_seed_successive_halving_drops_nothing():
    from pipeline.arms.protocol import Choice, seed_protocol

    runs = FakeRuns(table({0.001: [0.5, 0.9], 0.01: [0.6, 0.1], 0.1: [0.4, 0.2]}))
    kept, trials = seed_protocol(runs, [0.001, 0.01, 0.1], [0, 1], Choice(seeds=1, keep=1, n_val=6))
    assert runs.calls == [(0, 0.001), (0, 0.01), (0, 0.1), (1, 0.01)]
    assert set(trials) == {"0.001", "0.01", "0.1"}


# data_hunger.monitor_per_class: a run's plateau rule and kept weights read a fixed part of the validation split,
# and the choice reads the kept weights' score on the whole split


def monitored_curve(**data_hunger_values) -> Curve:
    params = tiny_params(cnn_widths=[4], **data_hunger_values)
    return Curve("paper", "tiny", "tiny", "supervised", params.data_hunger, 8, CPU)


def test_the_rule_scores_the_monitor_and_the_choice_reads_the_whole_split(curve_project, monkeypatch):
    curve_ = monitored_curve(monitor_per_class=1)
    data = cnn_arm.point_data(curve_, 2)
    assert len(data.val) == 6 and len(data.monitor) == 3 and data.monitor.labels.tolist() == [0, 1, 2]
    assert len(cnn_arm.point_data(curve_, 0).monitor.images) == 3  # the same images at every size
    assert cnn_arm.point_data(curve_, 0).monitor.images.equal(data.monitor.images)
    scored, models = [], []
    rule = protocol.train_until_plateau

    def spy_rule(model, *args, val, **kwargs):
        scored.append(len(val[1]))
        models.append(model)
        return rule(model, *args, val=val, **kwargs)

    monkeypatch.setattr(protocol, "train_until_plateau", spy_rule)
    result = cnn_arm.run_seed(curve_, data, 0, 0.003)
    whole = evaluate(models[0], data.val.images, data.val.labels, CPU, 8, data.prepare)
    assert scored == [3]  # the rule saw the monitor alone
    assert (result["val_acc"], result["val_loss"]) == (whole.accuracy, whole.loss)  # the kept weights, whole split
    assert result["monitor_val_acc"] * 3 == round(result["monitor_val_acc"] * 3)  # a score of three images
    assert [r["val_acc"] * 3 == round(r["val_acc"] * 3) for r in result["curve"]] == [True] * len(result["curve"])
    summary = point_summary("cnn", 2, data, {0: result | {"test_acc": 0.5}}, {}, [0.003], [1.0])
    assert (summary["n_val"], summary["n_monitor"]) == (6, 3)


def test_without_a_monitor_the_run_and_point_file_are_the_committed_protocols(curve_project, monkeypatch):
    curve_ = monitored_curve(monitor_per_class=0)
    data = cnn_arm.point_data(curve_, 2)
    assert data.monitor is None
    result = cnn_arm.run_seed(curve_, data, 0, 0.003)
    assert not {"monitor_val_acc", "monitor_val_loss"} & set(result)
    assert "n_monitor" not in point_summary("cnn", 2, data, {0: result | {"test_acc": 0.5}}, {}, [0.003], [1.0])


def test_a_monitor_larger_than_the_validation_split_is_refused_with_its_key(curve_project):
    with pytest.raises(UserError, match=r"data_hunger.monitor_per_class asks for 3 images per class .* has only 2 "
                                        r"in the validation split.*lower data_hunger.monitor_per_class"):  # fmt: skip
        cnn_arm.point_data(monitored_curve(monitor_per_class=3), 2)
