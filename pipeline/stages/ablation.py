"""Stage ablation: the from-scratch collapse, isolated.

Seed 000's recipe (Adam, lr 3e-3, weight decay 0.3, constant lr, no clipping) ends with a ViT that predicts
one class. ``torch.optim.Adam(weight_decay=...)`` adds the decay to the gradient (L2), where Adam's
normalisation lets it dominate small gradients; the paper's optimiser decouples it (AdamW). Each variant
(``ablation.variants``) trains ``train_scratch``'s model on the same per-seed images for the same epochs and
learning rate, changing only that (see ``pipeline.core.arm_registry.DECAY_VARIANTS``): ``adam_l2`` (the seed's),
``adamw`` (decoupled, the same 0.3), ``adam_no_decay``. Every epoch records the weights' RMS and the
validation scores; the test set is scored once, at the end.

Writes ``metrics/ablation.json`` and ``plots/ablation.csv`` (per epoch, mean over seeds: each variant's
weight RMS and train loss); the plot stage draws ``plots/ablation.png``.
"""

from __future__ import annotations

import statistics

from pipeline.arms.scratch import run_decay_variant
from pipeline.core import paths
from pipeline.core.config import Params
from pipeline.core.entry import stage_main
from pipeline.core.files import write_json, write_text
from pipeline.core.logs import stage_log as log
from pipeline.core.params_yaml import load_params
from pipeline.data.images import load_split
from pipeline.data.subsets import SEED_ARMS_KEY, seed_subset, sweep_train_set, val_set
from pipeline.results.figures import SERIES, epochs_csv
from pipeline.results.stats import spread
from pipeline.tracking.tracker import stage_tracker
from pipeline.train.runtime import resolve_runtime

OUTPUT = paths.METRICS / "ablation.json"


def run_ablation(params: Params) -> tuple[dict, dict]:
    """Every variant over every seed; the summary and each variant's per-epoch means over seeds."""
    runtime = resolve_runtime(params.runtime)
    pool, val = sweep_train_set(params.preset, "scratch"), val_set("scratch")
    test_set = load_split(paths.prepared_split("scratch", "test"))
    recipe, variants, epochs = params.scratch_recipe, {}, {}
    with stage_tracker(params, "ablation", runtime=runtime, arm="scratch") as stage:
        for variant in params.ablation.variants:
            runs, histories = [], []
            for seed in params.seeds:
                differs = {"variant": variant, "seed": str(seed)}
                with stage.child(f"ablation-{variant}-seed{seed}", differs, **differs) as tracker:
                    sets = (seed_subset(pool, params.seed_arms_per_class, seed, SEED_ARMS_KEY), val, test_set)
                    run, history = run_decay_variant(variant, params.model_name, recipe, sets, runtime, seed,
                                                     params.evaluate.batch_size)  # fmt: skip
                    for record in history:
                        tracker.log_record(record, keys=SERIES)
                    tracker.log_metrics({**run, "final_test_acc": run["test_acc"]})
                runs.append(run)
                histories.append(history)
                log.info(f"ablation {variant}, seed {seed}: test_acc {run['test_acc']:.4f}, collapse "
                      f"{run['collapse']:.2f}, weight RMS {run['weight_rms_initial']:.4f} -> "
                      f"{run['weight_rms']:.5f}")  # fmt: skip
            variants[variant] = {key: spread([run[key] for run in runs]) for key in runs[0]}
            epochs[variant] = [
                {k: statistics.fmean(h[i][k] for h in histories) for k in SERIES if k in histories[0][i]}
                for i in range(len(histories[0]))
            ]
    summary = {
        "preset": params.preset, "variants": variants, "order": list(params.ablation.variants),
        "n_train": len(seed_subset(pool, params.seed_arms_per_class, params.seeds[0])), "n_val": len(val),
        "n_test": len(test_set), "classes": test_set.classes, "epochs": recipe.epochs,
        "lr": recipe.lr, "weight_decay": recipe.weight_decay, "runtime": runtime.describe(),
    }  # fmt: skip
    return summary, epochs


@stage_main
def main() -> None:
    params = load_params()
    summary, epochs = run_ablation(params)
    write_json(OUTPUT, summary)
    write_text(paths.PLOTS / "ablation.csv", epochs_csv(epochs))
    for variant in summary["order"]:
        acc = summary["variants"][variant]["test_acc"]
        log.info(f"ablation {variant}: test_acc {acc['mean']:.4f} ± {acc['std']:.4f}")


if __name__ == "__main__":
    main()
