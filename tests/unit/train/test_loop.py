"""pipeline.train.loop: per-image evaluation, the trainer, feature extraction."""

from __future__ import annotations

import copy
import math
import re

import pytest
import torch
import torch.nn.functional as F
from helpers import CPU, FixedLogits, grey_set, logits_correct_for, recipe_for, tiny_vit
from torch import nn

from pipeline.core.errors import UserError
from pipeline.data.images import ImageSet, batch_preparer
from pipeline.models.vit import ViT, vit_config
from pipeline.results.history import FIELDS
from pipeline.train.loop import NonFiniteLossError, Recording, epoch_batches, evaluate, extract_features, train
from pipeline.train.schedule import Recipe, epoch_steps, lr_factor

# --- engine: evaluation ----------------------------------------------------------------------


@pytest.mark.parametrize("batch_size", [1, 7, 32, 75, 100])
def test_evaluate_is_per_image_over_the_whole_set_for_any_batch_size(batch_size):
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(75, 3, generator=generator)
    labels = torch.randint(0, 3, (75,), generator=generator)
    result = evaluate(nn.Identity(), logits, labels, CPU, batch_size)
    assert result.accuracy == (logits.argmax(1) == labels).sum().item() / 75
    assert result.loss == pytest.approx(F.cross_entropy(logits, labels).item(), abs=1e-6)
    assert torch.equal(result.logits, logits)
    assert torch.equal(result.predictions, logits.argmax(1))


def test_evaluate_is_not_the_mean_of_per_batch_accuracies():
    # the seed's counter-example: 75 images in batches 32/32/11, the last 11 all wrong
    labels = torch.arange(75) % 3
    correct = torch.arange(75) < 64
    logits = logits_correct_for(labels, correct)
    per_batch_mean = sum(correct[s : s + 32].float().mean().item() for s in (0, 32, 64)) / 3
    assert per_batch_mean == pytest.approx(2 / 3)  # what the seed would report
    result = evaluate(nn.Identity(), logits, labels, CPU, batch_size=32)
    assert result.accuracy == pytest.approx(64 / 75)
    assert abs(result.accuracy - per_batch_mean) > 0.1


def test_evaluate_restores_training_mode():
    model = tiny_vit()
    model.train()
    evaluate(model, torch.randn(4, 3, 32, 32), torch.zeros(4, dtype=torch.int64), CPU, 2)
    assert model.training


# --- engine: training ------------------------------------------------------------------------


def per_epoch(n: int, recipe: Recipe) -> int:
    return epoch_steps(1, n, recipe.batch_size)


def train_tiny(seed: int, recipe: Recipe | None = None) -> tuple[ViT, list[dict]]:
    data = torch.Generator().manual_seed(123)
    images = torch.randn(20, 3, 32, 32, generator=data)
    labels = torch.randint(0, 3, (20,), generator=data)
    model = tiny_vit(seed=0)
    recipe = recipe or recipe_for(14, 2, lr=1e-3, batch_size=8)
    history = train(
        model, images[:14], labels[:14], recipe, CPU, torch.Generator().manual_seed(seed),
        recording=Recording(per_epoch(14, recipe), {"test": (images[14:], labels[14:])}),
    )  # fmt: skip
    return model, history


def test_train_is_bitwise_reproducible_for_a_seed_and_differs_for_another():
    model_a, history_a = train_tiny(seed=1)
    model_b, history_b = train_tiny(seed=1)
    model_c, history_c = train_tiny(seed=2)
    state_a, state_b, state_c = model_a.state_dict(), model_b.state_dict(), model_c.state_dict()
    assert all(torch.equal(state_a[k], state_b[k]) for k in state_a)
    assert history_a == history_b
    # another seed shuffles differently, so the weights must move differently
    assert not all(torch.equal(state_a[k], state_c[k]) for k in state_a)
    assert history_a != history_c


def test_history_records_have_every_field_and_train_metrics_are_per_image():
    seed = 5
    labels = torch.arange(75) % 3
    correct = torch.arange(75) < 40
    logits = logits_correct_for(labels, correct)
    seen = []
    history = train(
        FixedLogits(), logits, labels, recipe_for(75, 2, lr=0.1, batch_size=32), CPU,
        torch.Generator().manual_seed(seed),
        recording=Recording(3, {"val": (logits[:10], labels[:10])}, on_record=seen.append),
    )  # fmt: skip
    assert [(r["epoch"], r["step"]) for r in history] == [(1, 3), (2, 6)]
    assert all(set(r) == {*FIELDS, "step"} for r in history)
    assert seen == history
    for record in history:
        assert record["train_acc"] == pytest.approx(40 / 75)
        assert record["train_loss"] == pytest.approx(F.cross_entropy(logits, labels).item(), abs=1e-6)
        assert record["val_acc"] == pytest.approx(1.0)
    # epoch 1's shuffled batches (32/32/11): their per-batch mean differs, so the check above can fail
    order = torch.randperm(75, generator=torch.Generator().manual_seed(seed))
    per_batch = [correct[order[s : s + 32]].float().mean().item() for s in (0, 32, 64)]
    assert abs(sum(per_batch) / 3 - 40 / 75) > 1e-3


def test_history_without_a_test_set_has_only_train_fields():
    labels = torch.arange(6) % 3
    logits = logits_correct_for(labels, labels >= 0)
    history = train(FixedLogits(), logits, labels, recipe_for(6, 1, lr=0.1, batch_size=4), CPU, torch.Generator())
    loss = pytest.approx(F.cross_entropy(logits, labels).item())
    assert history == [{"epoch": 1, "step": 2, "train_loss": loss, "train_acc": 1.0}]  # one record, at the end


def test_epoch_batches_cover_each_epoch_once_with_a_short_last_batch():
    batches = epoch_batches(10, 4, torch.Generator().manual_seed(0))
    epochs = [[next(batches) for _ in range(3)] for _ in range(2)]
    for epoch in epochs:
        assert [len(b) for b in epoch] == [4, 4, 2]
        assert sorted(torch.cat(epoch).tolist()) == list(range(10))
    assert not torch.equal(torch.cat(epochs[0]), torch.cat(epochs[1]))  # reshuffled


def test_huge_learning_rate_raises_non_finite_loss_with_epoch_step_and_advice():
    with pytest.raises(NonFiniteLossError) as caught:
        train_tiny(seed=0, recipe=recipe_for(14, 5, lr=1e30, batch_size=8))
    message = str(caught.value)
    assert re.search(r"epoch \d+, step \d+", message)
    assert "Lower the lr" in message
    assert isinstance(caught.value, UserError)  # so stage_main prints it as one line


def test_nan_input_raises_non_finite_loss_naming_the_exact_epoch_and_step():
    calls = []

    def nan_on_fifth_batch(inputs, training, generator):
        calls.append(training)
        return inputs * math.nan if len(calls) == 5 else inputs

    labels = torch.arange(75) % 3
    # 75 images in batches of 32 = 3 steps per epoch, so the fifth batch is epoch 2, step 2
    with pytest.raises(NonFiniteLossError, match=r"at epoch 2, step 2;.*Lower the lr"):
        train(
            FixedLogits(), logits_correct_for(labels, labels >= 0), labels, recipe_for(75, 3, lr=0.1, batch_size=32),
            CPU, torch.Generator().manual_seed(0), prepare=nan_on_fifth_batch, recording=Recording(every=3),
        )  # fmt: skip


def test_grad_clip_runs_and_limits_the_update():
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(30, 10, generator=generator)
    labels = torch.randint(0, 3, (30,), generator=generator)

    def weight_change(grad_clip: float) -> float:
        torch.manual_seed(0)
        model = nn.Linear(10, 3)
        before = model.weight.detach().clone()
        recipe = recipe_for(30, 2, lr=0.05, batch_size=8, grad_clip=grad_clip)
        history = train(model, inputs, labels, recipe, CPU, torch.Generator().manual_seed(0))
        assert all(math.isfinite(r["train_loss"]) for r in history)
        return (model.weight.detach() - before).norm().item()

    free = weight_change(0.0)
    # Adam divides by the gradient's size, so only a clip far below eps (1e-8) shrinks its steps
    assert weight_change(1e-12) < 0.01 * free
    # a generous clip never binds and leaves training bitwise unchanged
    assert weight_change(1e6) == free


def test_backbone_recipe_steps_at_the_scheduled_lr_with_clipping_and_decoupled_decay(monkeypatch):
    """train wires the recipe in: every update runs at lr x lr_factor(step) (warmup, then cosine), clips to the
    recipe's norm, and AdamW decays the weights apart from the gradient."""
    import pipeline.train.loop as engine

    recipe = recipe_for(14, 5, lr=2e-3, batch_size=4, optimizer="adamw", weight_decay=0.05, schedule="cosine",
                        warmup_fraction=0.2, grad_clip=1.0)  # fmt: skip
    seen: list[tuple[float, float, str]] = []
    norms: list[tuple[float, float]] = []  # each step's gradient norm before and after the update's clipping
    real_step, real_clip = engine.optimizer_step, engine.nn.utils.clip_grad_norm_

    def recording_clip(parameters, max_norm, *args, **kwargs):
        parameters = list(parameters)
        before = real_clip(parameters, max_norm, *args, **kwargs)
        norms.append((before.item(), torch.nn.utils.get_total_norm([p.grad for p in parameters]).item()))
        return before

    def recording_step(loss, optimizer, parameters, grad_clip):
        seen.append((optimizer.lr, grad_clip, optimizer.name))
        real_step(loss, optimizer, parameters, grad_clip)

    monkeypatch.setattr(engine, "optimizer_step", recording_step)
    monkeypatch.setattr(engine.nn.utils, "clip_grad_norm_", recording_clip)
    _, history = train_tiny(seed=0, recipe=recipe)
    assert len(seen) == recipe.steps == 20
    expected = [2e-3 * lr_factor(step, recipe.steps, recipe) for step in range(recipe.steps)]
    assert [lr for lr, _, _ in seen] == pytest.approx(expected, rel=1e-12)
    assert expected[0] < expected[3] == pytest.approx(2e-3) and expected[-1] < 2e-4  # warmup, then decay
    assert {(clip, name) for _, clip, name in seen} == {(1.0, "AdamW")}
    assert len(norms) == recipe.steps and all(after <= 1.0 + 1e-5 for _, after in norms)  # clipped every step
    assert max(before for before, _ in norms) > 1.0  # and the clip bound: some gradients were larger
    assert history[-1]["train_loss"] < history[0]["train_loss"]


# --- the finetune equivalence (design claim of pipeline/stages/linear_probe.py) ---------------------


def test_head_on_precomputed_features_equals_training_the_frozen_model_end_to_end():
    backbone = tiny_vit(seed=7, num_classes=5)
    backbone.requires_grad_(False)
    images = torch.randint(0, 256, (24, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(8))
    labels = torch.arange(24) % 3
    image_set = ImageSet(images, labels, ["a", "b", "c"], (0.5, 0.4, 0.3), (0.2, 0.25, 0.3))
    prepare = batch_preparer(image_set, augment_train=False)
    torch.manual_seed(9)
    new_head = nn.Linear(32, 3)
    recipe = recipe_for(24, 3, lr=1e-2, batch_size=10)  # batches 10/10/4

    # seed 000's way: the whole frozen model runs forward on every batch, only the new head learns
    model = copy.deepcopy(backbone)
    model.heads.head = copy.deepcopy(new_head)
    model.heads.head.requires_grad_(True)
    model.eval()
    backbone_before = {k: v.clone() for k, v in model.state_dict().items() if not k.startswith("heads.")}
    history_full = train(model, images, labels, recipe, CPU, torch.Generator().manual_seed(3), prepare=prepare)

    # ours: features once (a different batch size on purpose), then the head alone
    features = extract_features(backbone, images, CPU, batch_size=7, prepare=prepare)
    assert features.shape == (24, 32) and features.dtype == torch.float32
    head = copy.deepcopy(new_head)
    history_head = train(head, features, labels, recipe, CPU, torch.Generator().manual_seed(3))

    assert torch.allclose(head.weight, model.heads.head.weight, atol=1e-5)
    assert torch.allclose(head.bias, model.heads.head.bias, atol=1e-5)
    for a, b in zip(history_head, history_full, strict=True):
        assert a == pytest.approx(b, abs=1e-5)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in backbone_before.items())  # stayed frozen
    # the comparison can fail: the head really moved, and another shuffle lands elsewhere
    assert (head.weight - new_head.weight).abs().max() > 1e-2
    other = copy.deepcopy(new_head)
    train(other, features, labels, recipe, CPU, torch.Generator().manual_seed(4))
    assert not torch.allclose(other.weight, head.weight, atol=1e-5)


def test_extract_features_runs_the_backbone_in_eval_mode():
    # with dropout, a backbone left in training mode would give different features on every call
    torch.manual_seed(0)
    backbone = ViT(vit_config("tiny", num_classes=3, dropout=0.5)).train()
    images = torch.randn(6, 3, 32, 32)
    features = extract_features(backbone, images, CPU, batch_size=4, prepare=lambda x, train, gen: x)
    with torch.no_grad():
        expected = backbone.eval().forward_features(images)
    assert torch.allclose(features, expected, atol=1e-6)


def test_progress_bars_stay_quiet_when_stderr_is_not_a_terminal(capsys):
    from pipeline.train.loop import progress_bar

    with progress_bar(10, "train") as bar:  # pytest captures stderr: not a terminal, as in CI or a log file
        assert bar.disable
        bar.update(10)
    train_tiny(0)
    assert capsys.readouterr().err == ""


def tiny_model(seed: int = 0, size: int = 8) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Flatten(), nn.Linear(size * size, 3))


def test_evaluate_through_an_augmenting_preparer_gives_the_plain_logits():
    image_set, model = grey_set(10, seed=0), tiny_model()
    augmenting = evaluate(model, image_set.images, image_set.labels, CPU, 4, batch_preparer(image_set, True))
    plain = evaluate(model, image_set.images, image_set.labels, CPU, 4, batch_preparer(image_set, False))
    assert torch.equal(augmenting.logits, plain.logits)
    assert (augmenting.loss, augmenting.accuracy) == (plain.loss, plain.accuracy)
    # the comparison can fail: the same model on augmented inputs gives other logits
    generator = torch.Generator().manual_seed(0)
    augmented = evaluate(model, image_set.images, image_set.labels, CPU, 4,
                         lambda images, _, __: batch_preparer(image_set, True)(images, True, generator))  # fmt: skip
    assert not torch.equal(augmented.logits, plain.logits)


def test_train_scores_its_evaluation_sets_without_augmentation():
    train_set, val_set = grey_set(12, seed=0), grey_set(9, seed=1)
    model = tiny_model()
    recipe = Recipe(lr=0.05, batch_size=4, steps=6, optimizer="adam", weight_decay=0.0, schedule="none",
                    warmup_fraction=0.0, grad_clip=0.0)  # fmt: skip
    plain = batch_preparer(val_set, augment_train=False)
    scored = []

    def check(record: dict) -> None:  # the model as it is at this record
        expected = evaluate(model, val_set.images, val_set.labels, CPU, 256, plain)
        scored.append(record)
        assert (record["val_loss"], record["val_acc"]) == (expected.loss, expected.accuracy)

    history = train(
        model, train_set.images, train_set.labels, recipe, CPU, torch.Generator().manual_seed(0),
        prepare=batch_preparer(train_set, augment_train=True),
        recording=Recording(2, {"val": (val_set.images, val_set.labels)}, 256, on_record=check),
    )  # fmt: skip
    assert [r["step"] for r in scored] == [2, 4, 6] and scored == history
    final = evaluate(model, val_set.images, val_set.labels, CPU, 256, plain)
    assert history[-1]["val_loss"] == final.loss
    generator = torch.Generator().manual_seed(0)
    augmented = evaluate(model, val_set.images, val_set.labels, CPU, 256,
                         lambda images, _, __: batch_preparer(val_set, True)(images, True, generator))  # fmt: skip
    assert augmented.loss != final.loss  # so the equality above is not true of any scoring


# --- the plateau schedule (warmup, constant, then a cooldown the validation rule begins) -----------------
