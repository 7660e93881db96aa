"""Stage sweep: one point of the data-hunger curve, one arm at one training-set size, once per seed.

``python -m pipeline.sweep <arm> <point>``; dvc.yaml runs it as two matrices, ``sweep_scratch``
(arm scratch/cnn x point 0..5) and ``sweep_pretrained`` (arm linear/finetune x point 0..5), and
``data_hunger`` gathers them.

Arms: ``scratch`` (the same ViT from random initialisation), ``cnn`` (a small ResNet of about the
same parameter count, :mod:`pipeline.cnn`, with the scratch arm's recipe: the inductive-bias
baseline), ``linear`` (the pretrained backbone frozen, a new linear head on features computed once)
and ``finetune`` (the whole pretrained backbone trained, with a new zero-initialised head, as the
paper fine-tunes). Every run takes the same fixed
number of optimiser steps of ``batch_size`` images whatever the set size, so a point costs the same
at 10 images per class as at 6000, and the test set is evaluated once, at the end.

Sizes: a point is an index into ``data_hunger.offline_sizes`` (images per class) or, for the paper
preset, ``data_hunger.paper_fractions`` (times the largest class's count, each class clipped to what
it has). Subsets are nested: each class's images are put in one fixed random order (seed
``SUBSET_SEED``, never chosen by test score) and a size takes the first ``n`` of each class.
"""

from __future__ import annotations

import dataclasses
import itertools
import sys
import time

import numpy as np
import torch
from torch import nn

from pipeline import paths
from pipeline.cnn import small_resnet
from pipeline.config import SWEEP_POINTS, DataHungerConfig, Params, load_params
from pipeline.data import ImageSet, batch_preparer, load_split
from pipeline.engine import Recipe, evaluate, extract_features, train
from pipeline.errors import UserError, stage_main
from pipeline.files import write_json
from pipeline.finetune_head import load_backbone
from pipeline.metrics import spread
from pipeline.model import ViT, count_parameters, vit_config
from pipeline.runtime import Runtime, resolve_runtime, seed_everything
from pipeline.tracking import stage_tracker

ARMS = ("scratch", "cnn", "linear", "finetune")
FROM_SCRATCH = ("scratch", "cnn")  # arms that train on images from random initialisation
SUBSET_SEED = 0  # the fixed order each class's images are taken in; never chosen by looking at test scores
TRAIN_ALL = paths.PREPARED / "train_all.pt"  # offline: every target-class training image (prepare stage)
OUTPUT = paths.METRICS / "data_hunger"


def point_path(arm: str, point: int):
    return OUTPUT / f"{arm}_{point}.json"


def sweep_train_set(params: Params, view: str) -> ImageSet:
    """The training images the sweep draws from: offline, all 6000 per class; paper, the train split."""
    return load_split(TRAIN_ALL if params.preset == "offline" else paths.prepared_split(view, "train"))


def sweep_sizes(params: Params, labels: torch.Tensor, num_classes: int) -> list[int]:
    """Images per class at each point, checked against what each class has.

    Raises:
        UserError: an offline size exceeds a class's count, or two paper fractions round to one size.
    """
    counts = torch.bincount(labels, minlength=num_classes).tolist()
    cfg = params.data_hunger
    if params.preset == "offline":
        sizes = list(cfg.offline_sizes)
        if sizes[-1] > min(counts):
            raise UserError(
                f"data_hunger.offline_sizes asks for {sizes[-1]} images per class but the smallest class has "
                f"{min(counts)}; lower the sizes in params.yaml"
            )
        return sizes
    sizes = [max(1, round(f * max(counts))) for f in cfg.paper_fractions]
    if any(a >= b for a, b in itertools.pairwise(sizes)):
        raise UserError(
            f"data_hunger.paper_fractions {cfg.paper_fractions} give {sizes} images per class (largest class "
            f"{max(counts)}); two points would be the same set. Space the fractions further apart"
        )
    return sizes


def nested_indices(labels: torch.Tensor, per_class: int, seed: int = SUBSET_SEED) -> torch.Tensor:
    """Sorted indices of the first ``per_class`` images of each class in a fixed per-class order.

    The order depends only on ``labels`` and ``seed``, so a smaller size is a subset of a larger one.
    A class with fewer images contributes all it has.
    """
    rng = np.random.default_rng(seed)
    labels_np = labels.numpy()
    chosen = []
    for class_id in range(int(labels_np.max()) + 1):
        order = rng.permutation(np.flatnonzero(labels_np == class_id))
        chosen.append(order[:per_class])
    return torch.from_numpy(np.sort(np.concatenate(chosen)))


def step_stream(n: int, steps: int, batch_size: int, generator: torch.Generator) -> torch.Tensor:
    """(steps * batch_size,) indices into ``n`` images, each used equally often (within one).

    Given to the engine as one "epoch", it makes exactly ``steps`` optimiser steps of ``batch_size``.
    """
    return torch.randperm(n, generator=generator)[torch.arange(steps * batch_size) % n]


def gather(inputs: torch.Tensor, prepare):
    """A batch function over stream indices: looks the inputs up, then applies ``prepare``."""

    def prepare_indices(index: torch.Tensor, training: bool, generator: torch.Generator) -> torch.Tensor:
        return prepare(inputs[index], training, generator)

    return prepare_indices


def finetune_model(backbone: ViT, num_classes: int) -> ViT:
    """A trainable copy of the pretrained backbone with a new zero-initialised head (paper, section 3.2)."""
    config = dataclasses.replace(backbone.config, num_classes=num_classes)
    model = ViT(config)
    state = {k: v for k, v in backbone.state_dict().items() if not k.startswith("heads.")}
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or set(missing) != {"heads.head.weight", "heads.head.bias"}:
        raise RuntimeError(f"backbone and model differ beyond the head: missing {missing}, unexpected {unexpected}")
    return model


def paper_recipe(cfg: DataHungerConfig, lr: float) -> Recipe:
    """The paper's recipe (AdamW, linear warmup then cosine decay, gradient clipping) as one "epoch" of
    ``cfg.steps`` steps over a :func:`step_stream`."""
    return Recipe(
        lr=lr, batch_size=cfg.batch_size, epochs=1, optimizer="adamw", weight_decay=cfg.weight_decay,
        schedule="cosine", warmup_fraction=cfg.warmup_fraction, grad_clip=cfg.grad_clip,
    )  # fmt: skip


def scratch_model(arm: str, params: Params, num_classes: int, in_channels: int) -> nn.Module:
    """A randomly initialised model of a from-scratch arm: the preset's ViT, or the small ResNet."""
    if arm == "cnn":
        return small_resnet(in_channels, num_classes, tuple(params.data_hunger.cnn_widths))
    return ViT(vit_config(params.model_name, num_classes=num_classes))


def run_seed(arm: str, params: Params, data: dict, runtime: Runtime, seed: int) -> tuple[dict, float, float, int]:
    """Trains one run of ``arm`` and evaluates it once on the whole test set.

    Returns the training record, test accuracy, test loss and the number of trained parameters.
    """
    cfg = params.data_hunger
    generator = seed_everything(seed)
    labels, num_classes = data["train_labels"], data["num_classes"]
    stream = step_stream(len(labels), cfg.steps, cfg.batch_size, generator)
    if arm == "linear":
        recipe = Recipe(lr=cfg.linear_lr, batch_size=cfg.batch_size, epochs=1, optimizer="adam")
        model = nn.Linear(data["train_inputs"].shape[1], num_classes).to(runtime.device)
        prepare = test_prepare = data["prepare"]
    else:
        recipe = paper_recipe(cfg, cfg.scratch_lr if arm in FROM_SCRATCH else cfg.finetune_lr)
        if arm in FROM_SCRATCH:
            model = scratch_model(arm, params, num_classes, data["train_inputs"].shape[1])
        else:
            model = finetune_model(data["backbone"], num_classes)
        model = model.to(runtime.device)
        prepare, test_prepare = data["prepare"], data["test_prepare"]
    history = train(
        model,
        stream,
        labels[stream],
        recipe,
        runtime,
        generator,
        prepare=gather(data["train_inputs"], prepare),
        description=f"{arm} seed {seed}",
    )
    result = evaluate(
        model, data["test_inputs"], data["test_labels"], runtime, params.evaluate.batch_size, test_prepare
    )
    return history[-1], result.accuracy, result.loss, count_parameters(model, trainable_only=True)


def load_point(arm: str, params: Params, point: int, runtime: Runtime) -> dict:
    """The subset for ``point`` and the test set, as the arm consumes them (images, or frozen features)."""
    view = "scratch" if arm in FROM_SCRATCH else "pretrained"
    train_all = sweep_train_set(params, view)
    test_set = load_split(paths.prepared_split(view, "test"))
    num_classes = len(train_all.classes)
    n = sweep_sizes(params, train_all.labels, num_classes)[point]
    index = nested_indices(train_all.labels, n)
    data = {
        "n": n,
        "num_classes": num_classes,
        "train_inputs": train_all.images[index],
        "train_labels": train_all.labels[index],
        "test_inputs": test_set.images,
        "test_labels": test_set.labels,
        "prepare": batch_preparer(train_all, augment_train=True),
        "test_prepare": batch_preparer(test_set, augment_train=False),
    }
    if arm not in FROM_SCRATCH:
        backbone = load_backbone(params, runtime)
        data["backbone"] = backbone
    if arm == "linear":
        batch = params.evaluate.batch_size
        no_augment = batch_preparer(train_all, augment_train=False)
        data["train_inputs"] = extract_features(backbone, data["train_inputs"], runtime, batch, no_augment)
        data["test_inputs"] = extract_features(backbone, test_set.images, runtime, batch, data["test_prepare"])
        data["prepare"] = data["test_prepare"] = lambda inputs, training, generator: inputs
    return data


def run_point(params: Params, arm: str, point: int) -> dict:
    """Every seed of one arm at one size; returns the point's summary (written as JSON by ``main``)."""
    runtime = resolve_runtime(params.runtime)
    data = load_point(arm, params, point, runtime)
    n, cfg = data["n"], params.data_hunger
    accuracies, losses, train_losses = [], [], []
    for seed in params.seeds:
        started = time.perf_counter()
        with stage_tracker(
            params, f"sweep-{arm}-{n}", seed=seed, runtime=runtime, arm=arm, n_train_per_class=str(n), point=str(point)
        ) as tracker:
            last, accuracy, loss, trained_parameters = run_seed(arm, params, data, runtime, seed)
            tracker.log_metrics(
                {"train_loss": last["train_loss"], "train_acc": last["train_acc"], "test_acc": accuracy,
                 "test_loss": loss, "final_test_acc": accuracy, "final_test_loss": loss}, step=cfg.steps,
            )  # fmt: skip
        accuracies.append(accuracy)
        losses.append(loss)
        train_losses.append(last["train_loss"])
        print(
            f"sweep {arm} n={n}/class seed {seed}: test_acc {accuracy:.4f}, {cfg.steps} steps in "
            f"{time.perf_counter() - started:.1f} s"
        )
    return {
        "arm": arm,
        "point": point,
        "n_train_per_class": n,
        "n_train": len(data["train_labels"]),
        "n_test": len(data["test_labels"]),
        "steps": cfg.steps,
        "batch_size": cfg.batch_size,
        "trained_parameters": trained_parameters,
        "test_acc": spread(accuracies),
        "test_loss": spread(losses),
        "train_loss": spread(train_losses),
        "runtime": runtime.describe(),
    }


def parse_args(argv: list[str]) -> tuple[str, int]:
    usage = f"usage: python -m pipeline.sweep <arm: {'|'.join(ARMS)}> <point: 0..{SWEEP_POINTS - 1}>"
    if len(argv) != 2 or argv[0] not in ARMS or not argv[1].isdigit() or int(argv[1]) >= SWEEP_POINTS:
        raise UserError(f"{usage}, got {argv}")
    return argv[0], int(argv[1])


@stage_main
def main() -> None:
    arm, point = parse_args(sys.argv[1:])
    params = load_params()
    summary = run_point(params, arm, point)
    write_json(point_path(arm, point), summary)
    acc = summary["test_acc"]
    print(f"sweep {arm} n={summary['n_train_per_class']}/class: test_acc {acc['mean']:.4f} ± {acc['std']:.4f}")


if __name__ == "__main__":
    main()
