"""Stage evaluate: per-image test metrics of seed 000's two arms over seeds, with baselines, sizes and
counts, and beside them every arm of the curve's protocol at ``data_hunger.headline_point`` (75 per class).

Writes ``metrics/evaluate.json`` (the contract users diff across commits; keep its names stable)
and, for `dvc plots`, each arm's predictions of every seed as ``plots/confusion/<arm>.csv``. This is where
seed 000's arms meet the test set, once.
"""

from __future__ import annotations

from pipeline.arms.linear import evaluate_linear
from pipeline.arms.scratch import evaluate_scratch
from pipeline.core import paths
from pipeline.core.entry import stage_main
from pipeline.core.files import read_json, write_json, write_text
from pipeline.core.logs import stage_log as log
from pipeline.core.params_yaml import load_params
from pipeline.data import presets
from pipeline.data.images import load_split
from pipeline.data.subsets import SEED_ARMS_KEY, seed_subset, sweep_train_set, val_set
from pipeline.results.curve_results import baselines, protocol_arms
from pipeline.results.metrics import confusion, predictions_csv, summarise
from pipeline.results.stats import numeric_leaves
from pipeline.tracking.tracker import stage_tracker
from pipeline.train.loop import count_parameters
from pipeline.train.runtime import resolve_runtime


@stage_main
def main() -> None:
    params = load_params()
    runtime = resolve_runtime(params.runtime)
    pool = sweep_train_set(params.preset, "scratch")
    test_set = load_split(paths.prepared_split("scratch", "test"))
    pretrained_test = load_split(paths.prepared_split("pretrained", "test"))
    classes, labels = test_set.classes, test_set.labels
    n_train = len(seed_subset(pool, params.seed_arms_per_class, params.seeds[0], SEED_ARMS_KEY))
    metrics = {"preset": params.preset, "n_train": n_train, "n_val": len(val_set("scratch")),
               "n_test": len(test_set), "classes": classes}  # fmt: skip
    matrices = {}
    batch = params.evaluate.batch_size
    scratch, scratch_model = evaluate_scratch(params.model_name, params.seeds, test_set, runtime, batch)
    linear, linear_model = evaluate_linear(params.backbone_model_name, params.backbone_source, params.seeds,
                                           pretrained_test, runtime, batch)  # fmt: skip
    head_params = linear_model.heads.head.weight.numel() + linear_model.heads.head.bias.numel()
    for arm, results, model, trainable in (
        ("scratch", scratch, scratch_model, count_parameters(scratch_model)),
        ("linear", linear, linear_model, head_params),
    ):
        metrics[arm] = summarise(results, labels, classes, model, count_parameters(model), trainable)
        matrices[arm] = {str(seed): confusion(labels, r.predictions, len(classes)) for seed, r in results.items()}
        predictions = {seed: result.predictions for seed, result in results.items()}
        write_text(paths.CONFUSION / f"{arm}.csv", predictions_csv(labels, predictions, classes))
    n = n_train // len(classes) if presets.get(params.preset).sizes_are_counts else None  # as the arms drew them
    seed_baselines = baselines(pool, test_set, [n], 10**9, params.seeds)  # chance, majority, logreg: seed mean
    metrics["baselines"] = next(iter(seed_baselines.values()))
    metrics["protocol"] = protocol_arms(read_json(paths.METRICS / "data_hunger.json"), params.data_hunger)
    metrics["runtime"] = runtime.describe()
    write_json(paths.METRICS / "evaluate.json", metrics)
    write_json(paths.CONFUSION / "matrices.json", {"classes": classes, "matrices": matrices})
    with stage_tracker(params, "evaluate", runtime=runtime) as tracker:  # the headline numbers, in MLflow too
        tracker.log_metrics(numeric_leaves(metrics))
        tracker.log_artifact(paths.METRICS / "evaluate.json")
        tracker.log_artifact(paths.CONFUSION, "confusion")
    for arm in paths.HEADLINE_VIEWS:
        acc = metrics[arm]["test_acc"]
        log.info(f"evaluate: {arm} test accuracy {acc['mean']:.4f} ± {acc['std']:.4f} over seeds {params.seeds}")
    log.info(f"evaluate: baselines {metrics['baselines']}")


if __name__ == "__main__":
    main()
