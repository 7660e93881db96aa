"""Arm ``scratch``: the preset's ViT from random initialisation. Its checkpoints, its evaluation, its
curve runs, and the recipe ablation's variants (which all train this arm)."""

from __future__ import annotations

from pipeline import paths
from pipeline.arms.common import Curve, curve_recipe, load_point, seeded_run
from pipeline.config import DataHungerConfig, ScratchRecipe
from pipeline.data import ImageSet, batch_preparer
from pipeline.engine import Evaluation, Recipe, budget_batches, evaluate, train
from pipeline.errors import UserError
from pipeline.files import load_tensors
from pipeline.metrics import collapse
from pipeline.model import ViT, vit_config
from pipeline.runtime import Runtime, seed_everything

VIEW = "scratch"


def point_data(curve: Curve, point: int) -> dict:
    return load_point(curve, VIEW, point)


def run_seed(curve: Curve, data: dict, seed: int) -> tuple[dict, float, float, int]:
    """One curve run: ``data_hunger.scratch``'s optimiser (the paper's recipe) for the fixed step budget."""
    recipe = curve_recipe(curve.config, "scratch")

    def build() -> ViT:
        return ViT(vit_config(curve.model_name, num_classes=data["num_classes"]))

    return seeded_run(curve, data, seed, recipe, build, f"scratch seed {seed}")


def load_scratch(model_name: str, num_classes: int, seed: int, runtime: Runtime) -> ViT:
    """The from-scratch ViT (preset ``model_name``) of one seed, in eval mode."""
    model = ViT(vit_config(model_name, num_classes=num_classes))
    state = load_tensors(paths.scratch_model(seed))
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as error:
        raise UserError(
            f"{paths.scratch_model(seed)} does not fit model {model_name!r} with {num_classes} classes "
            f"({str(error).splitlines()[0]}); rerun `dvc repro`"
        ) from None
    return model.to(runtime.device).eval()


def evaluate_scratch(
    model_name: str, seeds: list[int], test_set: ImageSet, runtime: Runtime, batch_size: int
) -> tuple[dict[int, Evaluation], ViT]:
    """Each seed's from-scratch ViT on the whole test set; returns the results and the last model."""
    model = ViT(vit_config(model_name, num_classes=len(test_set.classes))).to(runtime.device)
    results = {}
    for seed in seeds:
        model.load_state_dict(load_tensors(paths.scratch_model(seed)), strict=True)
        results[seed] = evaluate(
            model,
            test_set.images,
            test_set.labels,
            runtime,
            batch_size,
            batch_preparer(test_set, False),
        )
    return results, model


def variant_settings(variant: str, cfg: DataHungerConfig, seed_recipe: ScratchRecipe) -> tuple[Recipe, bool, str]:
    """The recipe, whether to augment, and the pooling of one variant name (checked by the config)."""
    recipe_name, *options = variant.split("+")
    if recipe_name == "paper":
        recipe = curve_recipe(cfg, "scratch")
    else:  # train_scratch's optimiser at the curve's batch size and budget
        recipe = Recipe.of(seed_recipe, cfg.batch_size, cfg.steps)
    return recipe, "aug" in options, "mean" if "mean" in options else "cls"


def run_variant(
    variant: str, curve: Curve, seed_recipe: ScratchRecipe, train_set: ImageSet, test_set: ImageSet, seed: int
) -> dict:
    """One seed of one variant: trains for the fixed step budget, then tests once."""
    recipe, augment, pool = variant_settings(variant, curve.config, seed_recipe)
    runtime = curve.runtime
    generator = seed_everything(seed)
    config = vit_config(curve.model_name, num_classes=len(train_set.classes), pool=pool)
    model = ViT(config).to(runtime.device)
    history = train(
        model, train_set.images, train_set.labels, recipe, runtime, generator,
        batches=budget_batches(len(train_set), recipe.steps, recipe.batch_size, generator),
        prepare=batch_preparer(train_set, augment_train=augment),
    )  # fmt: skip
    result = evaluate(
        model, test_set.images, test_set.labels, runtime, curve.eval_batch_size,
        batch_preparer(test_set, augment_train=False),
    )  # fmt: skip
    return {
        "test_acc": result.accuracy,
        "test_loss": result.loss,
        "train_loss": history[-1]["train_loss"],
        "collapse": collapse(result.predictions),
    }
