"""Stage ablation: which parts of the training recipe the from-scratch ViT needs at the few-shot size.

Seed 000 (exercise 5) and seed 003 ask whether the from-scratch ViT's failure on a few hundred
images is data hunger or recipe. Every variant trains the preset's ViT from random initialisation
on the same training split as ``train_scratch`` (225 images offline) for the data-hunger sweep's
fixed budget (``data_hunger.steps`` steps of ``data_hunger.batch_size``), so variants differ only in
recipe; each runs once per seed and is tested once on the whole test set.

A variant (``ablation.variants``) is a recipe and options:

- ``seed``: ``train_scratch``'s optimiser settings (seed 000: Adam, lr 3e-3, weight decay 0.3 added
  to the gradient, constant lr, no clipping);
- ``paper``: the sweep's scratch recipe (``data_hunger.scratch``: AdamW, decoupled weight decay, linear
  warmup then cosine decay, gradient clipping), as in the paper's Appendix B.1;
- ``+aug``: random crop after 2-pixel padding and horizontal flip;
- ``+mean``: the head reads the mean of the patch tokens instead of the class token (Appendix D.3).

The plot stage draws ``plots/ablation.png`` from ``metrics/ablation.json``.
"""

from __future__ import annotations

import time

from pipeline import paths
from pipeline.arms.common import Curve
from pipeline.arms.scratch import run_variant
from pipeline.config import Params, load_params
from pipeline.data import load_split
from pipeline.errors import stage_main
from pipeline.files import write_json
from pipeline.metrics import baselines, spread
from pipeline.runtime import resolve_runtime
from pipeline.tracking import stage_tracker

OUTPUT = paths.METRICS / "ablation.json"


def run_ablation(params: Params) -> dict:
    """Every variant over every seed; ``{variants: {name: {metric: spread}}, baselines, ...}``."""
    runtime = resolve_runtime(params.runtime)
    train_set = load_split(paths.prepared_split("scratch", "train"))
    test_set = load_split(paths.prepared_split("scratch", "test"))
    curve = Curve(params.preset, params.model_name, params.backbone_model_name, params.data_hunger,
                  params.evaluate.batch_size, runtime)  # fmt: skip
    variants = {}
    with stage_tracker(params, "ablation", runtime=runtime, arm="scratch") as stage:
        for variant in params.ablation.variants:
            runs = []
            for seed in params.seeds:
                started = time.perf_counter()
                name, differs = f"ablation-{variant}-seed{seed}", {"variant": variant, "seed": str(seed)}
                with stage.child(name, differs, **differs) as tracker:
                    run = run_variant(variant, curve, params.scratch_recipe, train_set, test_set, seed)
                    tracker.log_metrics({**run, "final_test_acc": run["test_acc"]}, step=params.data_hunger.steps)
                runs.append(run)
                print(f"ablation {variant}, seed {seed}: test_acc {run['test_acc']:.4f}, collapse "
                      f"{run['collapse']:.2f}, {time.perf_counter() - started:.1f} s")  # fmt: skip
            variants[variant] = {key: spread([run[key] for run in runs]) for key in runs[0]}
    return {
        "preset": params.preset,
        "variants": variants,
        "order": list(params.ablation.variants),  # the JSON's keys are sorted; plots and tables keep this order
        "baselines": baselines(
            train_set.images, train_set.labels, test_set.images, test_set.labels, len(test_set.classes)
        ),
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
