"""Stage ablation: which parts of the training recipe the from-scratch ViT needs at the few-shot size.

Seed 000 (exercise 5) and seed 003 ask whether the from-scratch ViT's failure on a few hundred
images is data hunger or recipe. Every variant trains the preset's ViT from random initialisation
on the same training split as ``train_scratch`` (225 images offline) for the data-hunger sweep's
fixed budget (``data_hunger.steps`` steps of ``data_hunger.batch_size``), so variants differ only in
recipe; each runs once per seed and is tested once on the whole test set.

A variant (``ablation.variants``) is a recipe and options:

- ``seed``: ``train_scratch``'s optimiser settings (seed 000: Adam, lr 3e-3, weight decay 0.3 added
  to the gradient, constant lr, no clipping);
- ``paper``: the sweep's scratch recipe (AdamW, ``data_hunger.scratch_lr``, decoupled weight decay,
  linear warmup then cosine decay, gradient clipping), as in the paper's Appendix B.1;
- ``+aug``: random crop after 2-pixel padding and horizontal flip;
- ``+mean``: the head reads the mean of the patch tokens instead of the class token (Appendix D.3).

The plot stage draws ``plots/ablation.png`` from ``metrics/ablation.json``.
"""

from __future__ import annotations

import time

from pipeline import paths
from pipeline.config import Params, load_params
from pipeline.data import ImageSet, batch_preparer, load_split
from pipeline.engine import Recipe, evaluate, train
from pipeline.errors import stage_main
from pipeline.files import write_json
from pipeline.metrics import collapse, majority_baseline, pixels_logreg, spread
from pipeline.model import ViT, vit_config
from pipeline.runtime import Runtime, resolve_runtime, seed_everything
from pipeline.sweep import gather, paper_recipe, step_stream
from pipeline.tracking import stage_tracker

OUTPUT = paths.METRICS / "ablation.json"


def variant_settings(variant: str, params: Params) -> tuple[Recipe, bool, str]:
    """The recipe, whether to augment, and the pooling of one variant name (checked by the config)."""
    recipe_name, *options = variant.split("+")
    cfg = params.data_hunger
    if recipe_name == "paper":
        recipe = paper_recipe(cfg, cfg.scratch_lr)
    else:
        seed_cfg = params.scratch_recipe
        recipe = Recipe(
            lr=seed_cfg.lr, batch_size=cfg.batch_size, epochs=1, optimizer=seed_cfg.optimizer,
            weight_decay=seed_cfg.weight_decay, schedule=seed_cfg.schedule,
            warmup_fraction=seed_cfg.warmup_fraction, grad_clip=seed_cfg.grad_clip,
        )  # fmt: skip
    return recipe, "aug" in options, "mean" if "mean" in options else "cls"


def run_variant(
    variant: str, params: Params, train_set: ImageSet, test_set: ImageSet, runtime: Runtime, seed: int
) -> dict:
    """One seed of one variant: trains for the fixed step budget, then tests once."""
    recipe, augment, pool = variant_settings(variant, params)
    generator = seed_everything(seed)
    stream = step_stream(len(train_set), params.data_hunger.steps, recipe.batch_size, generator)
    config = vit_config(params.model_name, num_classes=len(train_set.classes), pool=pool)
    model = ViT(config).to(runtime.device)
    history = train(
        model, stream, train_set.labels[stream], recipe, runtime, generator,
        prepare=gather(train_set.images, batch_preparer(train_set, augment_train=augment)),
    )  # fmt: skip
    result = evaluate(
        model, test_set.images, test_set.labels, runtime, params.evaluate.batch_size,
        batch_preparer(test_set, augment_train=False),
    )  # fmt: skip
    return {
        "test_acc": result.accuracy,
        "test_loss": result.loss,
        "train_loss": history[-1]["train_loss"],
        "collapse": collapse(result.predictions),
    }


def run_ablation(params: Params) -> dict:
    """Every variant over every seed; ``{variants: {name: {metric: spread}}, baselines, ...}``."""
    runtime = resolve_runtime(params.runtime)
    train_set = load_split(paths.prepared_split("scratch", "train"))
    test_set = load_split(paths.prepared_split("scratch", "test"))
    variants = {}
    for variant in params.ablation.variants:
        runs = []
        for seed in params.seeds:
            started = time.perf_counter()
            with stage_tracker(
                params, f"ablation-{variant}", seed=seed, runtime=runtime, arm="scratch", variant=variant
            ) as tracker:
                run = run_variant(variant, params, train_set, test_set, runtime, seed)
                tracker.log_metrics({**run, "final_test_acc": run["test_acc"]}, step=params.data_hunger.steps)
            runs.append(run)
            print(
                f"ablation {variant}, seed {seed}: test_acc {run['test_acc']:.4f}, collapse {run['collapse']:.2f}, "
                f"{params.data_hunger.steps} steps in {time.perf_counter() - started:.1f} s"
            )
        variants[variant] = {key: spread([run[key] for run in runs]) for key in runs[0]}
    return {
        "preset": params.preset,
        "variants": variants,
        "order": list(params.ablation.variants),  # the JSON's keys are sorted; plots and tables keep this order
        "baselines": {
            "chance": 1 / len(test_set.classes),
            "majority": majority_baseline(train_set.labels, test_set.labels),
            "pixels_logreg": pixels_logreg(train_set.images, train_set.labels, test_set.images, test_set.labels),
        },
        "n_train": len(train_set),
        "n_test": len(test_set),
        "steps": params.data_hunger.steps,
        "batch_size": params.data_hunger.batch_size,
        "runtime": runtime.describe(),
    }


@stage_main
def main() -> None:
    params = load_params()
    summary = run_ablation(params)
    write_json(OUTPUT, summary)
    for variant in summary["order"]:
        acc = summary["variants"][variant]["test_acc"]
        print(f"ablation {variant}: test_acc {acc['mean']:.4f} ± {acc['std']:.4f}")


if __name__ == "__main__":
    main()
