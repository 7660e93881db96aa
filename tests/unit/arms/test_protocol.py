"""pipeline.arms.protocol: what every arm of the curve shares: the grid-edge flag and the learning-rate choice."""

from __future__ import annotations

from pipeline.arms.protocol import at_edge, choose_lr


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
