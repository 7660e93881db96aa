"""pipeline.arms.common: what every arm of the curve shares: the grid-edge flag and the learning-rate choice."""

from __future__ import annotations

from pipeline.arms.common import at_edge, choose_lr


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
