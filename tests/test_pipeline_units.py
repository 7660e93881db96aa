"""Unit tests of the library modules: config, engine, data, metrics, files, tracking, runtime, errors.

Everything runs in float32 on the CPU with the "tiny" ViT and a few dozen random images. The
finetune test proves the design claim in pipeline/finetune_head.py: training a new head on
features computed once equals seed 000's end-to-end training of the frozen model, step for step.
"""

from __future__ import annotations

import copy
import dataclasses
import io
import math
import os
import pickle
import random
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import yaml
from torch import nn

from pipeline import files
from pipeline import runtime as runtime_module
from pipeline.config import ConfigError, Params, RuntimeConfig, flatten, load_params, parse_params
from pipeline.data import (
    ImageSet,
    augment,
    batch_preparer,
    decode_image,
    few_shot_indices,
    list_image_folder,
    load_split,
)
from pipeline.engine import NonFiniteLossError, Recipe, evaluate, extract_features, lr_factor, train
from pipeline.errors import UserError, stage_main
from pipeline.history import FIELDS
from pipeline.metrics import collapse, majority_baseline, per_class, pixels_logreg, spread
from pipeline.model import ViT, vit_config
from pipeline.runtime import Runtime, resolve_runtime, seed_everything

ROOT = Path(__file__).resolve().parents[1]
CPU = Runtime(torch.device("cpu"), "fp32")


def raw_params() -> dict:
    """The committed params.yaml as a plain mapping, to edit one value per test."""
    return yaml.safe_load((ROOT / "params.yaml").read_text())


def with_value(data: dict, dotted: str, value) -> dict:
    data = copy.deepcopy(data)
    *sections, last = dotted.split(".")
    node = data
    for section in sections:
        node = node.setdefault(section, {})
    node[last] = value
    return data


class FixedLogits(nn.Module):
    """Returns its inputs as logits; the parameter gets a zero gradient, so Adam never moves anything.

    This makes every train/eval accuracy a known function of the data, whatever the batch order.
    """

    def __init__(self) -> None:
        super().__init__()
        self.unused = nn.Parameter(torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 0 * self.unused


def logits_correct_for(labels: torch.Tensor, correct: torch.Tensor, num_classes: int = 3) -> torch.Tensor:
    """Logits (N, K) whose argmax is the label where ``correct`` and another class elsewhere."""
    predicted = torch.where(correct, labels, (labels + 1) % num_classes)
    return F.one_hot(predicted, num_classes).float() * 2.0


def tiny_vit(seed: int = 0, num_classes: int = 3) -> ViT:
    torch.manual_seed(seed)
    model = ViT(vit_config("tiny", num_classes=num_classes))
    with torch.no_grad():  # the zero-initialised head would hide every difference in the logits
        nn.init.normal_(model.heads.head.weight, std=0.5)
    return model


# --- config ----------------------------------------------------------------------------------


def test_committed_params_yaml_parses_to_exactly_its_values():
    params = load_params(ROOT / "params.yaml")
    flat = flatten(params)
    # every value written in the file must arrive unchanged (not silently replaced by a default)

    def leaves(prefix: str, value, parsed) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                leaves(f"{prefix}.{key}" if prefix else key, item, getattr(parsed, key))
        else:
            expected = float(value) if isinstance(parsed, float) else value
            assert flat[prefix] == str(expected), prefix

    leaves("", raw_params(), params)


def test_empty_params_file_gives_the_defaults(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text("")
    assert load_params(path) == Params()


@pytest.mark.parametrize(
    ("dotted", "shown"),
    [("colour", "colour"), ("train_scratch.offline.lrr", "train_scratch.offline.lrr"), ("runtime.gpu", "runtime.gpu")],
)
def test_unknown_key_names_the_full_key_and_the_allowed_keys(dotted, shown):
    with pytest.raises(ConfigError) as caught:
        parse_params(with_value(raw_params(), dotted, 1))
    message = str(caught.value)
    assert repr(shown) in message
    node = Params()
    for part in dotted.split(".")[:-1]:
        node = getattr(node, part)
    allowed = [f.name for f in dataclasses.fields(node)]
    assert str(sorted(allowed)) in message


@pytest.mark.parametrize(
    ("dotted", "value"),
    [
        ("train_scratch.offline.lr", "fast"),
        ("train_scratch.offline.lr", True),  # YAML's true is a bool, not the number 1
        ("train_scratch.offline.epochs", 2.5),
        ("seeds", 3),
        ("seeds", [0, "one"]),
        ("offline.mirror", "yes"),
        ("offline.classes", "Coat"),
        ("runtime", "cpu"),
    ],
)
def test_mistyped_value_names_the_key(dotted, value):
    with pytest.raises(ConfigError, match=re.escape(dotted)):
        parse_params(with_value(raw_params(), dotted, value))


@pytest.mark.parametrize(
    ("dotted", "value", "allowed"),
    [
        ("train_scratch.offline.lr", -0.1, "must be positive"),
        ("finetune_head.offline.lr", 0, "must be positive"),
        ("train_scratch.offline.batch_size", 0, "at least 1"),
        ("evaluate.batch_size", 0, "at least 1"),
        ("backbone.epochs", 0, "at least 1"),
        ("backbone.warmup_fraction", 1.5, "[0, 1)"),
        ("backbone.grad_clip", -1, "must not be negative"),
        ("train_scratch.offline.optimizer", "sgd", "adam, adamw"),
        ("train_scratch.offline.schedule", "step", "none, cosine"),
        ("runtime.device", "tpu", "auto, cpu, cuda, mps"),
        ("runtime.precision", "fp16", "auto, bf16, fp32"),
        ("preset", "imagenet", "offline, paper"),
        ("offline.model", "ViT-B/16", "'B/16'"),
        ("paper.backbone_model", "tinyy", "'tiny'"),
        ("offline.classes", ["Coat", "Hat"], "'Ankle boot'"),
        ("offline.train_per_class", 0, "between 1 and 6000"),
        ("paper.url", "ftp://example.com/data.zip", "https, http or file"),
        ("paper.weights_url", "example.com/w.pth", "https, http or file"),
        ("paper.sha256", "5e9596fc", "64 lowercase hex"),
        ("paper.sha256", "Z" * 64, "64 lowercase hex"),
        ("seeds", [1, 1], "must not repeat"),
        ("seeds", [], "at least one seed"),
    ],
)
def test_out_of_range_value_names_the_key_and_what_is_allowed(dotted, value, allowed):
    with pytest.raises(ConfigError) as caught:
        parse_params(with_value(raw_params(), dotted, value))
    assert dotted in str(caught.value)
    assert allowed in str(caught.value)


def test_repeated_offline_class_is_rejected():
    with pytest.raises(ConfigError, match=r"offline\.classes"):
        parse_params(with_value(raw_params(), "offline.classes", ["Coat", "Coat", "Shirt"]))


def test_unknown_non_string_key_beside_another_unknown_key_gives_config_error(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text("on: 1\ncolour: red\n")
    with pytest.raises(ConfigError, match="colour"):
        load_params(path)


@pytest.mark.parametrize(
    ("dotted", "value"),
    [
        ("paper.url", "https"),
        ("train_scratch.offline.lr", float("inf")),
        ("train_scratch.offline.weight_decay", float("inf")),
    ],
)
def test_degenerate_values_are_rejected(dotted, value):
    with pytest.raises(ConfigError, match=re.escape(dotted)):
        parse_params(with_value(raw_params(), dotted, value))


def test_missing_params_file_names_the_path(tmp_path):
    path = tmp_path / "nowhere" / "params.yaml"
    with pytest.raises(ConfigError, match=re.escape(str(path))):
        load_params(path)


def test_invalid_yaml_names_the_path(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text("train_scratch:\n  lr: [0.1, 0.2\n")
    with pytest.raises(ConfigError, match=re.escape(str(path))):
        load_params(path)


def test_integer_is_accepted_where_a_float_is_expected():
    params = parse_params(with_value(raw_params(), "train_scratch.offline.lr", 1))
    assert params.train_scratch.offline.lr == 1.0
    assert isinstance(params.train_scratch.offline.lr, float)


def test_params_are_frozen():
    params = parse_params(raw_params())
    with pytest.raises(dataclasses.FrozenInstanceError):
        params.train_scratch.offline.lr = 1.0  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        params.preset = "paper"  # type: ignore[misc]


def test_flatten_gives_dotted_string_keys_for_every_field():
    params = parse_params(with_value(raw_params(), "train_scratch.offline.lr", 0.125))
    flat = flatten(params)
    assert flat["train_scratch.offline.lr"] == "0.125"
    assert flat["preset"] == params.preset
    assert "seeds" in flat and "runtime.device" in flat and "paper.weights_sha256" in flat
    assert all(isinstance(v, str) for v in flat.values())
    assert "runtime" not in flat and "train_scratch" not in flat  # leaves only, never a whole section


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


def train_tiny(seed: int, recipe: Recipe | None = None) -> tuple[ViT, list[dict]]:
    data = torch.Generator().manual_seed(123)
    images = torch.randn(20, 3, 32, 32, generator=data)
    labels = torch.randint(0, 3, (20,), generator=data)
    model = tiny_vit(seed=0)
    recipe = recipe or Recipe(lr=1e-3, batch_size=8, epochs=2)
    history = train(
        model, images[:14], labels[:14], recipe, CPU, torch.Generator().manual_seed(seed),
        test_inputs=images[14:], test_labels=labels[14:],
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
        FixedLogits(), logits, labels, Recipe(lr=0.1, batch_size=32, epochs=2), CPU,
        torch.Generator().manual_seed(seed), test_inputs=logits[:10], test_labels=labels[:10], on_epoch=seen.append,
    )  # fmt: skip
    assert [r["epoch"] for r in history] == [1, 2]
    assert all(set(r) == set(FIELDS) for r in history)
    assert seen == history
    for record in history:
        assert record["train_acc"] == pytest.approx(40 / 75)
        assert record["train_loss"] == pytest.approx(F.cross_entropy(logits, labels).item(), abs=1e-6)
        assert record["test_acc"] == pytest.approx(1.0)
    # epoch 1's shuffled batches (32/32/11): their per-batch mean differs, so the check above can fail
    order = torch.randperm(75, generator=torch.Generator().manual_seed(seed))
    per_batch = [correct[order[s : s + 32]].float().mean().item() for s in (0, 32, 64)]
    assert abs(sum(per_batch) / 3 - 40 / 75) > 1e-3


def test_history_without_a_test_set_has_only_train_fields():
    labels = torch.arange(6) % 3
    history = train(
        FixedLogits(), logits_correct_for(labels, labels >= 0), labels, Recipe(lr=0.1, batch_size=4, epochs=1),
        CPU, torch.Generator().manual_seed(0),
    )  # fmt: skip
    assert set(history[0]) == {"epoch", "train_loss", "train_acc"}


def test_huge_learning_rate_raises_non_finite_loss_with_epoch_step_and_advice():
    with pytest.raises(NonFiniteLossError) as caught:
        train_tiny(seed=0, recipe=Recipe(lr=1e30, batch_size=8, epochs=5))
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
            FixedLogits(), logits_correct_for(labels, labels >= 0), labels, Recipe(lr=0.1, batch_size=32, epochs=3),
            CPU, torch.Generator().manual_seed(0), prepare=nan_on_fifth_batch,
        )  # fmt: skip


def test_lr_factor_warms_up_linearly_then_decays_by_cosine_to_zero():
    recipe = Recipe(lr=1.0, batch_size=1, epochs=1, schedule="cosine", warmup_fraction=0.1)
    factors = [lr_factor(step, 100, recipe) for step in range(100)]
    assert factors[:10] == pytest.approx([(i + 1) / 10 for i in range(10)])
    assert factors[10] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(factors[10:], factors[11:], strict=False))
    assert factors[55] == pytest.approx(0.5, abs=0.02)
    assert factors[-1] < 1e-3


def test_lr_factor_without_schedule_is_one_after_warmup():
    recipe = Recipe(lr=1.0, batch_size=1, epochs=1, schedule="none", warmup_fraction=0.25)
    factors = [lr_factor(step, 40, recipe) for step in range(40)]
    assert factors[0] == pytest.approx(0.1)
    assert factors[9:] == [1.0] * 31
    assert [lr_factor(s, 40, Recipe(lr=1.0, batch_size=1, epochs=1)) for s in range(40)] == [1.0] * 40


def test_grad_clip_runs_and_limits_the_update():
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(30, 10, generator=generator)
    labels = torch.randint(0, 3, (30,), generator=generator)

    def weight_change(grad_clip: float) -> float:
        torch.manual_seed(0)
        model = nn.Linear(10, 3)
        before = model.weight.detach().clone()
        recipe = Recipe(lr=0.05, batch_size=8, epochs=2, grad_clip=grad_clip)
        history = train(model, inputs, labels, recipe, CPU, torch.Generator().manual_seed(0))
        assert all(math.isfinite(r["train_loss"]) for r in history)
        return (model.weight.detach() - before).norm().item()

    free = weight_change(0.0)
    # Adam divides by the gradient's size, so only a clip far below eps (1e-8) shrinks its steps
    assert weight_change(1e-12) < 0.01 * free
    # a generous clip never binds and leaves training bitwise unchanged
    assert weight_change(1e6) == free


def test_backbone_recipe_with_warmup_cosine_and_clipping_trains():
    _, history = train_tiny(
        seed=0,
        recipe=Recipe(lr=2e-3, batch_size=4, epochs=2, optimizer="adamw", weight_decay=0.05, schedule="cosine",
                      warmup_fraction=0.1, grad_clip=1.0),
    )  # fmt: skip
    assert all(math.isfinite(r["train_loss"]) and math.isfinite(r["test_loss"]) for r in history)


# --- the finetune equivalence (design claim of pipeline/finetune_head.py) ---------------------


def test_head_on_precomputed_features_equals_training_the_frozen_model_end_to_end():
    backbone = tiny_vit(seed=7, num_classes=5)
    backbone.requires_grad_(False)
    images = torch.randint(0, 256, (24, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(8))
    labels = torch.arange(24) % 3
    image_set = ImageSet(images, labels, ["a", "b", "c"], (0.5, 0.4, 0.3), (0.2, 0.25, 0.3))
    prepare = batch_preparer(image_set, augment_train=False)
    torch.manual_seed(9)
    new_head = nn.Linear(32, 3)
    recipe = Recipe(lr=1e-2, batch_size=10, epochs=3, optimizer="adam")  # batches 10/10/4

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


# --- data ------------------------------------------------------------------------------------


def test_augment_keeps_shape_and_dtype_is_seeded_and_only_shifts_and_flips():
    images = torch.randint(1, 256, (16, 3, 8, 8), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    out = augment(images, torch.Generator().manual_seed(1))
    assert out.shape == images.shape and out.dtype == torch.uint8
    assert torch.equal(out, augment(images, torch.Generator().manual_seed(1)))
    assert not torch.equal(out, augment(images, torch.Generator().manual_seed(2)))
    assert any(not torch.equal(o, i) for o, i in zip(out, images, strict=True))
    # every output is one of the 5 x 5 shifts (zero padding 2) of the image or of its mirror image
    padded = F.pad(images, (2, 2, 2, 2))
    for image, result in zip(padded, out, strict=True):
        candidates = [
            view[:, dy : dy + 8, dx : dx + 8] for view in (image, image.flip(-1)) for dy in range(5) for dx in range(5)
        ]
        assert any(torch.equal(result, c) for c in candidates)


def test_normalise_maps_0_and_255_to_standardised_values():
    mean, std = (0.5, 0.4, 0.3), (0.2, 0.25, 0.5)
    images = torch.zeros(2, 3, 4, 4, dtype=torch.uint8)
    images[1] = 255
    out = ImageSet(images, torch.zeros(2, dtype=torch.int64), ["a"], mean, std).normalise(images)
    assert out.dtype == torch.float32
    for c in range(3):
        assert torch.allclose(out[0, c], torch.tensor((0 - mean[c]) / std[c]))
        assert torch.allclose(out[1, c], torch.tensor((1 - mean[c]) / std[c]))


def test_image_set_rejects_float_images_and_mismatched_labels():
    with pytest.raises(ValueError, match="uint8"):
        ImageSet(torch.zeros(2, 1, 4, 4), torch.zeros(2, dtype=torch.int64), ["a"], (0.5,), (0.5,))
    with pytest.raises(ValueError, match="2 images but 3 labels"):
        ImageSet(torch.zeros(2, 1, 4, 4, dtype=torch.uint8), torch.zeros(3, dtype=torch.int64), ["a"], (0.5,), (0.5,))


def test_image_set_save_load_round_trip(tmp_path):
    images = torch.randint(0, 256, (5, 1, 6, 6), dtype=torch.uint8)
    original = ImageSet(images, torch.tensor([0, 1, 2, 1, 0]), ["x", "y", "z"], (0.286,), (0.353,))
    original.save(tmp_path / "split.pt")
    loaded = load_split(tmp_path / "split.pt")
    assert torch.equal(loaded.images, original.images) and torch.equal(loaded.labels, original.labels)
    assert loaded.labels.dtype == torch.int64
    assert (loaded.classes, loaded.mean, loaded.std) == (["x", "y", "z"], (0.286,), (0.353,))


def test_load_split_of_a_missing_file_says_run_dvc_repro(tmp_path):
    with pytest.raises(UserError, match="dvc repro"):
        load_split(tmp_path / "train.pt")


def test_few_shot_indices_are_per_class_sorted_and_seeded():
    labels = np.random.default_rng(0).permutation(np.repeat(np.arange(5), 10))
    chosen = few_shot_indices(labels, [1, 3], per_class=4, seed=0)
    assert len(chosen) == 8
    assert list(chosen) == sorted(chosen)
    assert sorted(labels[chosen].tolist()) == [1] * 4 + [3] * 4
    assert np.array_equal(chosen, few_shot_indices(labels, [1, 3], per_class=4, seed=0))
    assert not np.array_equal(chosen, few_shot_indices(labels, [1, 3], per_class=4, seed=1))
    with pytest.raises(UserError, match="class 3 has 10 training images, fewer than 11"):
        few_shot_indices(labels, [3], per_class=11, seed=0)


def make_image_folder(root: Path, layout: dict[str, dict[str, int]]) -> None:
    for split, classes in layout.items():
        for name, count in classes.items():
            (root / split / name).mkdir(parents=True)
            for i in range(count):
                (root / split / name / f"{i}.jpg").write_bytes(b"")


def test_list_image_folder_sorts_classes_and_pairs_files_with_labels(tmp_path):
    make_image_folder(tmp_path, {"train": {"sushi": 2, "pizza": 1}, "test": {"pizza": 1, "sushi": 1}})
    (tmp_path / "train" / "pizza" / ".DS_Store").write_bytes(b"")  # hidden files and folders are not data
    (tmp_path / "train" / ".cache").mkdir()
    classes, pairs = list_image_folder(tmp_path)
    assert classes == ["pizza", "sushi"]
    assert pairs["train"] == [
        (tmp_path / "train" / "pizza" / "0.jpg", 0),
        (tmp_path / "train" / "sushi" / "0.jpg", 1),
        (tmp_path / "train" / "sushi" / "1.jpg", 1),
    ]
    assert pairs["test"] == [(tmp_path / "test" / "pizza" / "0.jpg", 0), (tmp_path / "test" / "sushi" / "0.jpg", 1)]


@pytest.mark.parametrize(
    ("layout", "named"),
    [
        ({"train": {"a": 1}}, ["test"]),
        ({"train": {"a": 1, "b": 0}, "test": {"a": 1, "b": 1}}, [os.path.join("train", "b")]),
        ({"train": {"a": 1, "b": 1}, "test": {"a": 1, "c": 1}}, ["'b'", "'c'"]),
    ],
    ids=["missing-test", "empty-class", "different-classes"],
)
def test_list_image_folder_rejects_bad_trees_naming_the_folder(tmp_path, layout, named):
    make_image_folder(tmp_path, layout)
    with pytest.raises(UserError) as caught:
        list_image_folder(tmp_path)
    for text in named:
        assert text in str(caught.value)
    if "'b'" not in named:
        assert str(tmp_path) in str(caught.value)


def write_image(path: Path, colour=(200, 100, 50), size=(40, 30), fmt: str | None = None) -> None:
    from PIL import Image

    Image.new("RGB", size, colour).save(path, format=fmt)


@pytest.mark.parametrize("mode", ["resize", "crop"])
def test_decode_image_gives_uint8_square_rgb_or_grey(tmp_path, mode):
    path = tmp_path / "photo.png"
    write_image(path)
    rgb = decode_image(path, 16, mode, channels=3, max_pixels=10**6)
    assert rgb.shape == (3, 16, 16) and rgb.dtype == torch.uint8
    assert rgb[:, 8, 8].tolist() == [200, 100, 50]  # channel order kept
    grey = decode_image(path, 16, mode, channels=1, max_pixels=10**6)
    assert grey.shape == (1, 16, 16) and grey.dtype == torch.uint8
    assert abs(int(grey[0, 8, 8]) - 124) <= 1  # ITU-R 601 luma of (200, 100, 50)


def test_decode_image_crop_takes_the_centre(tmp_path):
    from PIL import Image

    path = tmp_path / "wide.png"
    image = Image.new("RGB", (90, 30), (255, 0, 0))
    image.paste((0, 0, 255), (30, 0, 60, 30))  # blue middle third, red sides
    image.save(path)
    cropped = decode_image(path, 16, "crop", channels=3, max_pixels=10**6)
    assert (cropped[2] > 200).all() and (cropped[0] < 50).all()
    squashed = decode_image(path, 16, "resize", channels=3, max_pixels=10**6)
    assert squashed[0, 8, 0] > 200  # resize keeps the red sides


def test_decode_image_rejects_truncated_jpeg_and_non_image_naming_the_file(tmp_path):
    from PIL import Image

    full = io.BytesIO()
    noise = np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    Image.fromarray(noise).save(full, format="JPEG", quality=95)
    truncated = tmp_path / "cut.jpg"
    truncated.write_bytes(full.getvalue()[: len(full.getvalue()) // 2])
    text = tmp_path / "x.jpg"
    text.write_text("not an image\n")
    for path in (truncated, text):
        with pytest.raises(UserError, match=re.escape(str(path))):
            decode_image(path, 16, "resize", channels=3, max_pixels=10**6)
    whole = tmp_path / "whole.jpg"
    whole.write_bytes(full.getvalue())
    assert decode_image(whole, 16, "resize", channels=3, max_pixels=10**6).shape == (
        3,
        16,
        16,
    )  # only the cut one fails


# --- metrics ---------------------------------------------------------------------------------


def test_spread_reports_mean_sample_std_and_seeds():
    assert spread([1.0, 2.0, 3.0]) == {"mean": 2.0, "std": 1.0, "per_seed": [1.0, 2.0, 3.0]}  # not the population 0.816
    assert spread([0.7]) == {"mean": 0.7, "std": 0.0, "per_seed": [0.7]}


def test_collapse_is_the_share_of_the_most_predicted_class():
    assert collapse(torch.full((9,), 2)) == 1.0
    assert collapse(torch.tensor([0, 1, 2] * 4)) == pytest.approx(1 / 3)
    assert collapse(torch.tensor([0, 0, 0, 1])) == pytest.approx(0.75)


def test_majority_baseline_predicts_the_most_frequent_training_class():
    assert majority_baseline(torch.tensor([0, 1, 1, 2]), torch.tensor([1, 1, 0, 2])) == pytest.approx(0.5)
    # ties go to the lowest class index
    assert majority_baseline(torch.tensor([2, 2, 0, 0]), torch.tensor([0, 2, 2, 2])) == pytest.approx(0.25)


def test_per_class_reports_precision_recall_f1_and_zero_for_a_never_predicted_class():
    labels = torch.tensor([0, 0, 1, 1, 2, 2])
    predictions = torch.tensor([0, 0, 0, 1, 0, 1])
    report = per_class(labels, predictions, ["pizza", "steak", "sushi"])
    assert report["pizza"] == pytest.approx({"precision": 0.5, "recall": 1.0, "f1": 2 / 3})
    assert report["steak"] == pytest.approx({"precision": 0.5, "recall": 0.5, "f1": 0.5})
    assert report["sushi"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0}


def test_pixels_logreg_separates_dark_from_bright_images():
    generator = torch.Generator().manual_seed(0)
    dark = torch.randint(0, 60, (20, 1, 4, 4), dtype=torch.uint8, generator=generator)
    bright = torch.randint(190, 256, (20, 1, 4, 4), dtype=torch.uint8, generator=generator)
    images, labels = torch.cat([dark, bright]), torch.tensor([0] * 20 + [1] * 20)
    train_index, test_index = torch.arange(0, 40, 2), torch.arange(1, 40, 2)
    assert pixels_logreg(images[train_index], labels[train_index], images[test_index], labels[test_index]) == 1.0
    # the score is the test accuracy: swapped test labels must score 0
    assert pixels_logreg(images[train_index], labels[train_index], images[test_index], 1 - labels[test_index]) == 0.0


# --- files -----------------------------------------------------------------------------------


class OpensMarker:
    """Unpickling this calls ``open(marker, "w")``, which creates the marker: proof that code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


@pytest.mark.parametrize("writer", ["torch.save", "pickle"])
def test_load_tensors_refuses_pickled_code_and_runs_none_of_it(tmp_path, writer):
    marker = tmp_path / "code-ran"
    path = tmp_path / "model.pt"
    payload = {"weights": torch.zeros(2), "trap": OpensMarker(marker)}
    if writer == "torch.save":
        torch.save(payload, path)
    else:
        path.write_bytes(pickle.dumps(payload, protocol=2))  # torch's own legacy protocol
    with pytest.raises(UserError, match=re.escape(str(path))):
        files.load_tensors(path)
    assert not marker.exists()
    # the payload is live: an unsafe load runs it, so the check above can fail
    if writer == "torch.save":
        torch.load(path, weights_only=False)
    else:
        pickle.loads(path.read_bytes())
    assert marker.exists()


def test_load_tensors_rejects_truncated_and_garbage_files_naming_the_path(tmp_path):
    good = tmp_path / "good.pt"
    files.save_tensors(good, {"x": torch.arange(1000)})
    assert torch.equal(files.load_tensors(good)["x"], torch.arange(1000))
    truncated, garbage = tmp_path / "truncated.pt", tmp_path / "garbage.pt"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    garbage.write_bytes(os.urandom(512))
    for path in (truncated, garbage):
        with pytest.raises(UserError, match=re.escape(str(path))):
            files.load_tensors(path)


def test_load_tensors_of_a_missing_file_says_run_dvc_repro(tmp_path):
    with pytest.raises(UserError, match=r"dvc repro"):
        files.load_tensors(tmp_path / "absent.pt")


@pytest.mark.parametrize("fails", ["write_bytes", "os.replace"])
@pytest.mark.parametrize(
    "save", [lambda p: files.write_json(p, {"new": 1}), lambda p: files.save_tensors(p, {"new": torch.ones(3)})]
)
def test_failed_write_keeps_the_previous_file_and_leaves_no_temp_file(tmp_path, monkeypatch, fails, save):
    path = tmp_path / "out" / "result.json"
    files.write_json(path, {"old": 0})
    before = path.read_bytes()

    def half_then_fail(self, data):
        with open(self, "wb") as stream:
            stream.write(data[: len(data) // 2])
        raise OSError("disk full")

    def refuse(src, dst):
        raise OSError("rename refused")

    if fails == "write_bytes":
        monkeypatch.setattr(Path, "write_bytes", half_then_fail)
    else:
        monkeypatch.setattr(files.os, "replace", refuse)
    with pytest.raises(OSError):
        save(path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["result.json"]


def test_write_json_is_sorted_and_byte_stable(tmp_path):
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    files.write_json(first, {"zeta": 1, "alpha": {"y": 2, "x": [1, 2]}})
    files.write_json(second, {"alpha": {"x": [1, 2], "y": 2}, "zeta": 1})
    assert first.read_bytes() == second.read_bytes()
    lines = ["{", '  "alpha": {', '    "x": [', "      1,", "      2", "    ],", '    "y": 2', "  },"]
    lines += ['  "zeta": 1', "}"]
    assert first.read_text() == "\n".join(lines) + "\n"


# --- tracking --------------------------------------------------------------------------------


def test_tracking_uri_defaults_to_sqlite_under_dvc_root_and_env_overrides(tmp_path, monkeypatch):
    from pipeline.tracking import tracking_uri

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    assert tracking_uri() == f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://tracking.example:5000")
    assert tracking_uri() == "http://tracking.example:5000"


def test_stage_tracker_records_params_tags_and_metric_steps(tmp_path, monkeypatch):
    import mlflow

    from pipeline.tracking import stage_tracker

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))  # artifacts, if any, go under tmp_path
    params = parse_params(raw_params())
    with stage_tracker(params, "train_scratch", seed=2, arm="scratch") as tracker:
        tracker.log_metrics({"test_acc": 0.25}, step=1)
        tracker.log_metrics({"test_acc": 0.5}, step=2)
    client = mlflow.MlflowClient(uri)
    experiment = client.get_experiment_by_name(f"vit-{params.preset}")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == "train_scratch-seed2" and run.info.status == "FINISHED"
    assert run.data.params["train_scratch.offline.lr"] == str(params.train_scratch.offline.lr)
    assert run.data.tags["stage"] == "train_scratch" and run.data.tags["seed"] == "2"
    assert run.data.tags["arm"] == "scratch"
    assert re.fullmatch(r"[0-9a-f]{40}|unknown", run.data.tags["git_commit"])
    history = client.get_metric_history(run.info.run_id, "test_acc")
    assert sorted((m.step, m.value) for m in history) == [(1, 0.25), (2, 0.5)]
    assert "wall_time_s" in run.data.metrics


@pytest.mark.parametrize("store", ["sqlite-under-a-file", "http-closed-port"])
def test_tracker_warns_and_carries_on_when_mlflow_is_unreachable(tmp_path, monkeypatch, capsys, store):
    from pipeline.tracking import Tracker

    blocker = tmp_path / "a-file"
    blocker.write_text("")  # a directory cannot be made under a file, even by root
    uri = f"sqlite:///{blocker / 'x' / 'mlflow.db'}" if store.startswith("sqlite") else "http://127.0.0.1:9"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    with Tracker("vit-test", "run", {"stage": "x"}, {"a": "1"}) as tracker:
        assert tracker.client is None
        assert "warning: MLflow start failed" in capsys.readouterr().err
        tracker.log_metrics({"test_acc": 1.0}, step=1)
        tracker.log_artifact(blocker)
    assert capsys.readouterr().err == ""  # a no-op after the failure: no second attempt, no second warning


# --- runtime ---------------------------------------------------------------------------------


@pytest.fixture
def restore_torch_globals():
    """resolve_runtime sets process-wide torch state; put it back for the other tests."""
    threads = torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    yield
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_resolve_runtime_refuses_a_missing_cuda_naming_the_key(restore_torch_globals):
    with pytest.raises(UserError, match=r"runtime\.device is 'cuda'.*runtime\.device: auto"):
        resolve_runtime(RuntimeConfig(device="cuda"))


@pytest.mark.skipif(
    torch.cuda.is_available() or torch.backends.mps.is_available(), reason="auto picks an accelerator here"
)
def test_resolve_runtime_auto_is_cpu_without_an_accelerator(restore_torch_globals):
    runtime = resolve_runtime(RuntimeConfig(device="auto", precision="fp32", threads=1))
    assert (runtime.device, runtime.precision) == (torch.device("cpu"), "fp32")
    assert runtime.hardware == runtime_module.describe_cpu() and "bf16" in runtime.hardware
    assert torch.get_num_threads() == 1
    assert torch.are_deterministic_algorithms_enabled()


@pytest.fixture
def cpu_kind(monkeypatch):
    """Pretends to be a CPU of a chosen kind: the features torch reports and the probe's bf16 speedup."""

    def pretend(features: tuple[str, ...], speedup: float) -> list[str]:
        probes = []
        monkeypatch.setattr(runtime_module, "cpu_bf16_features", lambda: features)

        def probe() -> float:
            probes.append("probe")
            return speedup

        monkeypatch.setattr(runtime_module, "bf16_matmul_speedup", probe)
        runtime_module._warn_emulated_bf16.cache_clear()
        return probes

    yield pretend
    runtime_module._warn_emulated_bf16.cache_clear()


@pytest.mark.parametrize(
    ("features", "speedup", "expected", "probed"),
    [
        (("avx512_bf16",), 9.0, "bf16", True),  # native and fast: trusted
        (("amx",), 30.0, "bf16", True),
        (("avx512_bf16",), 0.05, "fp32", True),  # reports support but runs slowly: not trusted
        ((), 100.0, "fp32", False),  # no native feature: no probe needed, fp32
    ],
)
def test_auto_precision_on_a_cpu_is_bf16_only_where_native_and_fast(cpu_kind, features, speedup, expected, probed):
    probes = cpu_kind(features, speedup)
    assert runtime_module.choose_precision("auto", "cpu") == expected
    assert bool(probes) == probed


def test_explicit_bf16_on_an_emulating_cpu_runs_but_warns_once_with_the_slowdown_and_fix(cpu_kind, capsys):
    cpu_kind((), 1 / 85)
    assert runtime_module.choose_precision("bf16", "cpu") == "bf16"
    assert runtime_module.choose_precision("bf16", "cpu") == "bf16"
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1
    assert "85x slower than fp32" in lines[0] and "runtime.precision: auto" in lines[0]


def test_explicit_bf16_on_a_native_cpu_and_fp32_anywhere_are_silent(cpu_kind, capsys):
    cpu_kind(("avx512_bf16",), 9.0)
    assert runtime_module.choose_precision("bf16", "cpu") == "bf16"
    assert runtime_module.choose_precision("fp32", "cpu") == "fp32"
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(("supported", "requested", "expected"),
                         [(True, "auto", "bf16"), (False, "auto", "fp32"), (True, "fp32", "fp32"),
                          (False, "bf16", "fp32"), (True, "bf16", "bf16")])  # fmt: skip
def test_precision_on_cuda_follows_its_bf16_support(monkeypatch, supported, requested, expected):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: supported)
    assert runtime_module.choose_precision(requested, "cuda") == expected


@pytest.mark.parametrize("requested", ["auto", "bf16", "fp32"])
def test_precision_on_mps_is_fp32(requested):
    assert runtime_module.choose_precision(requested, "mps") == "fp32"


def test_the_real_probe_measures_a_positive_speedup_and_the_features_are_known_names():
    assert runtime_module.bf16_matmul_speedup() > 0
    assert set(runtime_module.cpu_bf16_features()) <= {"avx512_bf16", "amx"}


def test_runtime_record_and_tags_name_precision_and_hardware():
    runtime = Runtime(torch.device("cpu"), "fp32", "AVX2, no native bf16")
    assert runtime.describe() == "cpu fp32 (AVX2, no native bf16)"
    assert runtime.tags() == {"device": "cpu", "precision": "fp32", "hardware": "AVX2, no native bf16"}


def test_seed_everything_repeats_python_numpy_and_torch():
    def draw(seed: int) -> tuple:
        generator = seed_everything(seed)
        return random.random(), np.random.rand(), torch.rand(1).item(), torch.rand(1, generator=generator).item()

    assert draw(11) == draw(11)
    assert all(a != b for a, b in zip(draw(11), draw(12), strict=True))


# --- errors ----------------------------------------------------------------------------------


def fails_with_user_error() -> None:
    raise UserError("the data folder is empty; put images in it")


def test_stage_main_prints_one_line_and_exits_1(capsys, monkeypatch):
    monkeypatch.delenv("PIPELINE_DEBUG", raising=False)
    with pytest.raises(SystemExit) as caught:
        stage_main(fails_with_user_error)()
    assert caught.value.code == 1
    stage = __name__.rsplit(".", 1)[-1]
    assert capsys.readouterr().err == f"error in stage {stage}: the data folder is empty; put images in it\n"


def test_stage_main_reraises_with_pipeline_debug_and_passes_other_errors(monkeypatch):
    monkeypatch.setenv("PIPELINE_DEBUG", "1")
    with pytest.raises(UserError, match="data folder is empty"):
        stage_main(fails_with_user_error)()
    monkeypatch.delenv("PIPELINE_DEBUG")

    def bug() -> None:
        raise KeyError("a programming error keeps its traceback")

    with pytest.raises(KeyError):
        stage_main(bug)()
