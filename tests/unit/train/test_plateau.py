"""pipeline.train.plateau: the validation rule stops after its patience, keeps the best weights, prefers accuracy
then loss, never keeps a NaN, and under the plateau schedule decays once the validation loss levels off."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import CPU
from torch import nn

from pipeline.train import plateau
from pipeline.train.loop import NonFiniteLossError
from pipeline.train.plateau import Stopping, train_until_plateau
from pipeline.train.schedule import Recipe

# --- engine: evaluation ----------------------------------------------------------------------


class ScriptedValidation(nn.Module):
    """A model whose validation loss follows a script: one learnable scalar that training moves, and whose
    output on the validation inputs is chosen per record so that the loss there is known in advance."""

    def __init__(self, val_losses: list[float]) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(1))
        self.scores = iter(val_losses)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if not self.training:  # scoring the validation set: logits giving the scripted loss for label 0
            loss = next(self.scores)
            p = math.exp(-loss)  # probability of class 0; the others share the rest
            other = (1 - p) / 2
            row = torch.log(torch.tensor([p, other, other]))
            return row.expand(len(inputs), 3) + 0 * self.weight
        return torch.cat([self.weight.expand(len(inputs), 1), torch.zeros(len(inputs), 2)], dim=1)


def test_the_validation_rule_stops_after_patience_and_keeps_the_best_weights():
    # scores every 2 steps: best at step 4 (0.5), then 3 worse ones; patience 3 stops at step 10
    val_losses = [0.9, 0.5, 0.6, 0.7, 0.8, 0.4, 0.3]
    model = ScriptedValidation(val_losses)
    weights = []

    inputs, labels = torch.zeros(8, 1), torch.zeros(8, dtype=torch.long)
    recipe = Recipe(lr=0.1, batch_size=4, steps=100, optimizer="adam", weight_decay=0.0, schedule="none",
                    warmup_fraction=0.0, grad_clip=0.0)  # fmt: skip
    original = model.state_dict

    def state_dict(*args, **kwargs):
        weights.append(model.weight.item())
        return original(*args, **kwargs)

    model.state_dict = state_dict
    history, best = train_until_plateau(
        model, inputs, labels, recipe, CPU, torch.Generator().manual_seed(0),
        val=(torch.zeros(3, 1), torch.zeros(3, dtype=torch.long)), stopping=Stopping(eval_every=2, patience=3),
    )  # fmt: skip
    assert [r["step"] for r in history] == [2, 4, 6, 8, 10]  # stopped: 3 scores after the best, far below 100
    assert [round(r["val_loss"], 6) for r in history] == [0.9, 0.5, 0.6, 0.7, 0.8]
    assert best["step"] == 4 and best["val_loss"] == pytest.approx(0.5)
    assert model.weight.item() == weights[1]  # the weights saved at step 4 are back in the model
    assert model.weight.item() != weights[0]


@pytest.mark.parametrize("schedule", ["none", "plateau"])
def test_the_validation_rule_runs_to_the_cap_while_the_loss_improves(schedule):
    """Patience never runs out, and under the plateau schedule the loss never levels off: no decay begins."""
    model = ScriptedValidation([1.0, 0.9, 0.8, 0.7])
    recipe = Recipe(lr=0.1, batch_size=4, steps=8, optimizer="adam", weight_decay=0.0, schedule=schedule,
                    warmup_fraction=0.0, grad_clip=0.0)  # fmt: skip
    history, best = train_until_plateau(
        model, torch.zeros(8, 1), torch.zeros(8, dtype=torch.long), recipe, CPU, torch.Generator(),
        val=(torch.zeros(3, 1), torch.zeros(3, dtype=torch.long)), stopping=Stopping(eval_every=2, patience=1),
    )  # fmt: skip
    assert [r["step"] for r in history] == [2, 4, 6, 8] and best["step"] == 8
    assert best.get("decay_step") is None and ("decay_step" in best) == (schedule == "plateau")


def test_the_validation_rule_prefers_accuracy_and_breaks_ties_by_loss():
    from pipeline.train.plateau import better_score

    assert better_score({"val_acc": 0.6, "val_loss": 1.0}, {"val_acc": 0.5, "val_loss": 0.2})
    assert better_score({"val_acc": 0.5, "val_loss": 0.1}, {"val_acc": 0.5, "val_loss": 0.2})
    assert not better_score({"val_acc": 0.5, "val_loss": 0.2}, {"val_acc": 0.5, "val_loss": 0.2})  # first of equals
    assert not better_score({"val_acc": 0.4, "val_loss": 0.01}, {"val_acc": 0.5, "val_loss": 0.9})


def test_a_run_scored_at_step_0_keeps_its_start_when_training_only_makes_it_worse():
    """Fine-tuning starts at the probe: if every later score is worse, the start is what the rule keeps."""
    model = ScriptedValidation([0.2, 0.5, 0.6, 0.7])  # step 0, then steps 2, 4, 6
    start = model.weight.detach().clone()
    recipe = Recipe(lr=0.1, batch_size=4, steps=100, optimizer="adam", weight_decay=0.0, schedule="none",
                    warmup_fraction=0.0, grad_clip=0.0)  # fmt: skip
    history, best = train_until_plateau(
        model, torch.zeros(8, 1), torch.zeros(8, dtype=torch.long), recipe, CPU, torch.Generator(),
        val=(torch.zeros(3, 1), torch.zeros(3, dtype=torch.long)),
        stopping=Stopping(eval_every=2, patience=3, score_at_start=True),
    )  # fmt: skip
    assert [r["step"] for r in history] == [0, 2, 4, 6]
    assert best["step"] == 0 and torch.equal(model.weight.detach(), start)


def test_a_nan_validation_loss_stops_the_run_with_the_step_and_the_fix():
    model = ScriptedValidation([0.5, math.nan])
    recipe = Recipe(lr=0.1, batch_size=4, steps=100, optimizer="adam", weight_decay=0.0, schedule="none",
                    warmup_fraction=0.0, grad_clip=0.0)  # fmt: skip
    with pytest.raises(NonFiniteLossError, match=r"validation loss became nan at step 4.*lower the lr"):
        train_until_plateau(
            model, torch.zeros(8, 1), torch.zeros(8, dtype=torch.long), recipe, CPU, torch.Generator(),
            val=(torch.zeros(3, 1), torch.zeros(3, dtype=torch.long)), stopping=Stopping(eval_every=2, patience=3),
        )  # fmt: skip


def test_a_nan_is_never_kept_over_a_number():
    from pipeline.train.plateau import better_score

    assert better_score({"val_acc": 0.3, "val_loss": 1.2}, {"val_acc": 0.3, "val_loss": math.nan})
    assert not better_score({"val_acc": 0.3, "val_loss": math.nan}, {"val_acc": 0.3, "val_loss": 1.2})


def test_the_plateau_schedule_decays_once_the_validation_loss_levels_off_and_stops_when_the_decay_ends(
    monkeypatch,
):
    """Scores every 2 steps, windows of 2 scores: one lucky low score (step 4) does not begin the cooldown while
    the trend still falls (a best-so-far rule of patience 2 would have at step 8); at step 14 the last two
    scores' mean is no lower than the two before, so the decay runs over half of 14 steps rounded up to whole
    intervals (8), to step 22; the best score is kept, wherever it came."""
    import pipeline.train.loop as engine

    model = ScriptedValidation([0.9, 0.3, 0.6, 0.5, 0.35, 0.45, 0.5, 0.45, 0.2, 0.25, 0.3, 0.01])
    lrs = []
    real_step = engine.optimizer_step

    def recording_step(loss, optimizer, parameters, grad_clip):
        lrs.append(optimizer.lr)
        real_step(loss, optimizer, parameters, grad_clip)

    monkeypatch.setattr(engine, "optimizer_step", recording_step)
    recipe = Recipe(lr=0.1, batch_size=4, steps=100, optimizer="adam", weight_decay=0.0, schedule="plateau",
                    warmup_fraction=0.0, grad_clip=0.0)  # fmt: skip
    history, best = train_until_plateau(
        model, torch.zeros(8, 1), torch.zeros(8, dtype=torch.long), recipe, CPU, torch.Generator(),
        val=(torch.zeros(3, 1), torch.zeros(3, dtype=torch.long)),
        stopping=Stopping(eval_every=2, patience=2, cooldown_fraction=0.5),
    )  # fmt: skip
    assert [r["step"] for r in history] == list(range(2, 23, 2))
    assert (best["step"], best["decay_step"]) == (18, 14) and best["val_loss"] == pytest.approx(0.2)
    # the decay starts from the full rate: the step after the record that began it still runs at 0.1
    assert lrs == pytest.approx([0.1] * 15 + [0.1 * k / 8 for k in range(7, 0, -1)], rel=1e-12)


def test_narrower_plateau_windows_let_the_cooldown_begin_earlier(monkeypatch):
    """The floor is two windows: with windows of 2 scores a levelled loss begins the cooldown at the 4th score;
    with windows of 1 (``Stopping.window``) the same scores begin it at the 2nd, where the loss first rises."""
    recipe = Recipe(lr=0.1, batch_size=4, steps=100, optimizer="adam", weight_decay=0.0, schedule="plateau",
                    warmup_fraction=0.0, grad_clip=0.0)  # fmt: skip
    decays = {}
    for window in (None, 1):
        model = ScriptedValidation([0.5, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6])
        _, best = train_until_plateau(
            model, torch.zeros(8, 1), torch.zeros(8, dtype=torch.long), recipe, CPU, torch.Generator(),
            val=(torch.zeros(3, 1), torch.zeros(3, dtype=torch.long)),
            stopping=Stopping(eval_every=2, patience=2, cooldown_fraction=0.5, window=window),
        )  # fmt: skip
        decays[window] = best["decay_step"]
    assert decays == {None: 8, 1: 4}


def scripted_train(scores: list[tuple[float, float]]):
    """A stand-in for ``loop.train`` that scores validation every 2 steps from a script of (loss, accuracy) and
    stops where the validation rule says: what the rule sees, without a model that must produce both."""

    def train(model, inputs, labels, recipe, runtime, generator, *, prepare, recording, cooldown):
        history = []
        for index, (loss, accuracy) in enumerate(scores, start=1):
            history.append({"epoch": 0, "step": 2 * index, "val_loss": loss, "val_acc": accuracy})
            if recording.on_record(history[-1]):
                break
        return history

    return train


@pytest.mark.parametrize(("trend", "decay_step", "last_step"), [("loss", 8, 12), ("accuracy", 16, 24)])
def test_the_plateau_can_follow_the_selection_score_past_a_loss_that_climbs(monkeypatch, trend, decay_step,
                                                                            last_step):  # fmt: skip
    """An overconfident run: its validation loss climbs from the first score while its accuracy rises for 5
    scores. The loss trend begins the cooldown at the floor (two windows of 2 scores: step 8); the accuracy trend
    once the accuracy's last window is no higher than the one before (step 16). Both keep the best accuracy."""
    losses = [1.0 + 0.1 * k for k in range(12)]
    accuracies = [0.4, 0.5, 0.6, 0.7, 0.8, 0.8, 0.8, 0.7, 0.7, 0.7, 0.7, 0.7]
    monkeypatch.setattr(plateau, "train", scripted_train(list(zip(losses, accuracies, strict=True))))
    recipe = Recipe(lr=0.1, batch_size=4, steps=100, optimizer="adam", weight_decay=0.0, schedule="plateau",
                    warmup_fraction=0.0, grad_clip=0.0)  # fmt: skip
    history, best = plateau.train_until_plateau(
        nn.Linear(1, 3), torch.zeros(8, 1), torch.zeros(8, dtype=torch.long), recipe, CPU, torch.Generator(),
        val=(torch.zeros(3, 1), torch.zeros(3, dtype=torch.long)),
        stopping=Stopping(eval_every=2, patience=2, cooldown_fraction=0.5, trend=trend),
    )  # fmt: skip
    assert (best["decay_step"], history[-1]["step"]) == (decay_step, last_step)
    assert (best["step"], best["val_acc"]) == (10, 0.8)
