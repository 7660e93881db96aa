"""What the arms share on the data-hunger curve: the values they read, a point's data, and one run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import nn

from pipeline import paths
from pipeline.config import DataHungerConfig
from pipeline.curve import sweep_sizes, sweep_train_set
from pipeline.data import batch_preparer, load_split, nested_indices
from pipeline.engine import Recipe, budget_batches, count_parameters, evaluate, train
from pipeline.runtime import Runtime, seed_everything


@dataclass(frozen=True)
class Curve:
    """What an arm's curve runs read, picked out of params.yaml once by the stage that runs them."""

    preset: str  # offline | paper: where the training images come from and how sizes are read
    model_name: str  # the from-scratch arms' ViT preset
    backbone_model: str  # the pretrained backbone's ViT preset
    config: DataHungerConfig  # sizes, steps, batch size and each arm's optimiser
    eval_batch_size: int
    runtime: Runtime


def curve_recipe(cfg: DataHungerConfig, arm: str) -> Recipe:
    """An arm's optimiser (``data_hunger.<arm>``) at the curve's batch size, for its fixed step budget."""
    return Recipe.of(getattr(cfg, arm), cfg.batch_size, cfg.steps)


def load_point(curve: Curve, view: str, point: int) -> dict:
    """The nested subset for ``point`` and the whole test set, as images of ``view``'s transform."""
    train_all = sweep_train_set(curve.preset, view)
    test_set = load_split(paths.prepared_split(view, "test"))
    num_classes = len(train_all.classes)
    n = sweep_sizes(curve.config, curve.preset, train_all.labels, num_classes)[point]
    index = nested_indices(train_all.labels, n)
    return {
        "n": n,
        "num_classes": num_classes,
        "train_all": train_all,
        "train_inputs": train_all.images[index],
        "train_labels": train_all.labels[index],
        "test_inputs": test_set.images,
        "test_labels": test_set.labels,
        "prepare": batch_preparer(train_all, augment_train=True),
        "test_prepare": batch_preparer(test_set, augment_train=False),
    }


def seeded_run(
    curve: Curve, data: dict, seed: int, recipe: Recipe, build_model: Callable[[], nn.Module], description: str
) -> tuple[dict, float, float, int]:
    """One run of an arm on the curve: seeds everything, builds the model, trains it for the fixed step budget
    (:func:`budget_batches` of the point's images) and tests it once on the whole test set.

    Returns the last training record, test accuracy, test loss and the number of trained parameters.
    """
    cfg, runtime = curve.config, curve.runtime
    generator = seed_everything(seed)
    model = build_model().to(runtime.device)
    batches = budget_batches(len(data["train_labels"]), cfg.steps, cfg.batch_size, generator)
    history = train(
        model, data["train_inputs"], data["train_labels"], recipe, runtime, generator,
        batches=batches, prepare=data["prepare"], description=description,
    )  # fmt: skip
    result = evaluate(
        model, data["test_inputs"], data["test_labels"], runtime, curve.eval_batch_size, data["test_prepare"]
    )
    return history[-1], result.accuracy, result.loss, count_parameters(model, trainable_only=True)
