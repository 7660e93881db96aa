"""Arm ``scratch``: the preset's ViT from random initialisation. Its evaluation, its curve runs and the
ablation's decay variants (its checkpoints: :mod:`pipeline.train.checkpoints`)."""

from __future__ import annotations

import dataclasses

from pipeline.arms.protocol import Curve, Point, fit_seed, load_point
from pipeline.core.arm_registry import DECAY_VARIANTS, REGISTRY
from pipeline.core.recipes import GridOptimiser, ScratchRecipe
from pipeline.data.images import ImageSet, batch_preparer
from pipeline.data.subsets import seed_subset
from pipeline.models.vit import ViT, vit_config
from pipeline.results.metrics import collapse
from pipeline.train.checkpoints import load_scratch_weights
from pipeline.train.loop import Evaluation, Recording, evaluate, train
from pipeline.train.runtime import Runtime, seed_everything
from pipeline.train.schedule import epoch_recipe

VIEW = REGISTRY["scratch"].view


def point_data(curve: Curve, point: int) -> Point:
    return load_point(curve, VIEW, point)


def run_seed(curve: Curve, data: Point, seed: int, lr: float) -> dict:
    """One seed at one learning rate of ``data_hunger.scratch.lrs`` (the paper's recipe), validation rule."""

    def build(train_set: ImageSet) -> ViT:
        return ViT(vit_config(curve.model_name, num_classes=data.num_classes))

    return fit_seed(curve, data, seed, lr, "scratch", build)


def evaluate_scratch(
    model_name: str, seeds: list[int], test_set: ImageSet, runtime: Runtime, batch_size: int
) -> tuple[dict[int, Evaluation], ViT]:
    """Each seed's from-scratch ViT on the whole test set; returns the results and the last model."""
    model = ViT(vit_config(model_name, num_classes=len(test_set.classes))).to(runtime.device)
    results = {}
    for seed in seeds:
        load_scratch_weights(model, model_name, seed)
        results[seed] = evaluate(
            model,
            test_set.images,
            test_set.labels,
            runtime,
            batch_size,
            batch_preparer(test_set, False),
        )
    return results, model


FIRST_ATTENTION = "encoder.layers.encoder_layer_0.self_attention.in_proj_weight"


def weight_rms(model: ViT) -> dict[str, float]:
    """Root mean square of every weight matrix together (``weight_rms``) and of layer 0's attention input
    projection: how far weight decay has pulled the weights towards 0."""
    matrices = [p.detach() for p in model.parameters() if p.ndim >= 2]
    total = sum(m.pow(2).sum().item() for m in matrices) / sum(m.numel() for m in matrices)
    first = model.get_parameter(FIRST_ATTENTION).detach()
    return {"weight_rms": total**0.5, "attention0_rms": first.pow(2).mean().sqrt().item()}


def train_decay_variant(
    variant: str, model_name: str, recipe: ScratchRecipe, train_set: ImageSet, val_set: ImageSet, runtime: Runtime,
    seed: int,
) -> tuple[ViT, list[dict]]:  # fmt: skip
    """One seed of one variant for the recipe's epochs, with the weight RMS and validation scores per epoch
    (epoch 0: at initialisation)."""
    optimizer, decay = DECAY_VARIANTS[variant].optimizer, DECAY_VARIANTS[variant].weight_decay
    changed = dataclasses.replace(
        recipe, optimizer=optimizer, weight_decay=recipe.weight_decay if decay is None else decay
    )
    full, steps_per_epoch = epoch_recipe(changed, len(train_set), recipe.batch_size)
    generator = seed_everything(seed)
    config = vit_config(model_name, num_classes=len(train_set.classes), dropout=recipe.dropout,
                        dropout_after_attention=False)  # fmt: skip
    model = ViT(config).to(runtime.device)
    history = [{"epoch": 0, **weight_rms(model)}]

    def record_norms(record: dict) -> None:
        history.append({**record, **weight_rms(model)})

    recording = Recording(steps_per_epoch, {"val": (val_set.images, val_set.labels)}, on_record=record_norms,
                          description=f"ablation {variant} seed {seed}")  # fmt: skip
    train(model, train_set.images, train_set.labels, full, runtime, generator,
          prepare=batch_preparer(train_set, recipe.augment), recording=recording)  # fmt: skip
    return model, history


def run_decay_variant(
    variant: str, model_name: str, recipe: ScratchRecipe, sets: tuple[ImageSet, ImageSet, ImageSet],
    runtime: Runtime, seed: int, eval_batch_size: int,
) -> tuple[dict, list[dict]]:  # fmt: skip
    """:func:`train_decay_variant` on (train, val, test) sets, then the test set once; returns the run's
    numbers and its per-epoch records."""
    train_set, val_set, test_set = sets
    model, history = train_decay_variant(variant, model_name, recipe, train_set, val_set, runtime, seed)
    result = evaluate(
        model, test_set.images, test_set.labels, runtime, eval_batch_size, batch_preparer(test_set, False)
    )
    first, last = history[0], history[-1]
    run = {
        "test_acc": result.accuracy, "test_loss": result.loss, "collapse": collapse(result.predictions),
        "train_loss": last["train_loss"], "val_acc": last["val_acc"], "val_loss": last["val_loss"],
        "weight_rms_initial": first["weight_rms"], "weight_rms": last["weight_rms"],
        "attention0_rms_initial": first["attention0_rms"], "attention0_rms": last["attention0_rms"],
    }  # fmt: skip
    return run, history


# Seed 000's recipe changed one thing at a time toward the curve's protocol (the collapse stage), each a setting of
# data_hunger.scratch (or data_hunger's budget and validation rule); "protocol" changes them all at once.
TOWARD_PROTOCOL = {
    "seed": "seed 000's recipe (Adam, decay 0.3 added to the gradient, lr 3e-3, batch 32, 10 epochs)",
    "decoupled_decay": "AdamW, the protocol's decoupled decay",
    "lr": "the protocol's learning rate at this size (chosen on validation)",
    "warmup": "the protocol's linear warmup, then constant",
    "clipping": "the protocol's gradient clipping",
    "plateau_steps": "the protocol's batch and steps: trained until the validation curve levels off, best kept",
    "augment": "random crop and flip",
    "protocol": "all of the above: the curve's run at this size",
}


def toward_protocol(change: str, seed_recipe: ScratchRecipe, protocol, lr: float) -> tuple[ScratchRecipe, bool]:
    """Seed 000's ``seed_recipe`` with ``change`` of :data:`TOWARD_PROTOCOL` taken from ``protocol``
    (``data_hunger.scratch``) at learning rate ``lr``; second, whether the run follows the curve's validation
    rule over its budget (``plateau_steps``, ``protocol``) rather than the recipe's epochs."""
    settings = {
        "decoupled_decay": {"optimizer": protocol.optimizer, "weight_decay": protocol.weight_decay},
        "lr": {"lr": lr},
        "warmup": {"warmup_fraction": protocol.warmup_fraction},
        "clipping": {"grad_clip": protocol.grad_clip},
        "augment": {"augment": True},
    }
    if change not in TOWARD_PROTOCOL:
        raise ValueError(f"unknown change {change!r}; choose one of {list(TOWARD_PROTOCOL)}")
    chosen = [values for name, values in settings.items() if change in (name, "protocol")]
    recipe = dataclasses.replace(seed_recipe, **{k: v for values in chosen for k, v in values.items()})
    return recipe, change in ("plateau_steps", "protocol")


def run_toward_protocol(curve: Curve, data: Point, seed: int, recipe: ScratchRecipe, plateau: bool) -> dict:
    """One seed of one change: under the validation rule (:func:`fit_seed`: the protocol's batch and budget,
    ``recipe``'s optimiser on the plateau schedule, the best-validation weights kept) or for the recipe's epochs,
    its final weights kept (as seed 000's run). The test set is scored once, at the end."""
    prepare = batch_preparer(data.pool, augment_train=recipe.augment)
    built: list[ViT] = []

    def build(train_set: ImageSet) -> ViT:
        built.append(ViT(vit_config(curve.model_name, num_classes=data.num_classes, dropout=recipe.dropout,
                                    dropout_after_attention=False)))  # fmt: skip
        return built[-1]

    if plateau:
        grid = GridOptimiser(recipe.optimizer, [recipe.lr], recipe.weight_decay, "plateau", recipe.warmup_fraction,
                             recipe.grad_clip)  # fmt: skip
        along = dataclasses.replace(curve, config=dataclasses.replace(curve.config, scratch=grid))
        result = fit_seed(along, dataclasses.replace(data, prepare=prepare), seed, recipe.lr, "scratch", build)
        model, run = built[-1], {key: result[key] for key in ("val_acc", "val_loss", "steps")}
    else:
        train_set = seed_subset(data.pool, data.n, seed)
        generator = seed_everything(seed)
        model = build(train_set).to(curve.runtime.device)
        steps_recipe, _ = epoch_recipe(recipe, len(train_set), recipe.batch_size)
        train(model, train_set.images, train_set.labels, steps_recipe, curve.runtime, generator, prepare=prepare,
              recording=Recording(description=f"collapse seed {seed}"))  # fmt: skip
        val = evaluate(model, data.val.images, data.val.labels, curve.runtime, curve.eval_batch_size, data.score)
        run = {"val_acc": val.accuracy, "val_loss": val.loss, "steps": steps_recipe.steps}
    test = evaluate(model, data.test.images, data.test.labels, curve.runtime, curve.eval_batch_size, data.score)
    return run | {"test_acc": test.accuracy, "test_loss": test.loss, "collapse": collapse(test.predictions)}
