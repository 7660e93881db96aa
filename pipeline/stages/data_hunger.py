"""Stage data_hunger: the sweep's points gathered into metrics/data_hunger.json and plots/data_hunger.png.

The paper's point is a curve: pretraining matters most when data is scarce, and the gap closes as
data grows. The JSON is ``{arm: {n_train_per_class: {mean, std, per_seed}}}`` (test accuracy over the whole test
set), ``runs`` (each arm's final train loss, best validation loss and step, chosen learning rate or ridge per
size, and how many runs stopped at the cap and at the floor) and ``baselines`` per size: chance, the majority
training class and, up to ``data_hunger.logreg_max_per_class``, a logistic regression on raw pixels fit on the
same subsets (mean over seeds). ``plots/validation.csv`` and ``plots/validation.png`` hold every trained run's
validation curve.
``metrics/comparisons.json`` holds every comparison the README states (``pipeline.results.stats.COMPARISONS``) at
every size: the paired difference over seeds with its 95% t interval and verdict (ahead, behind, level).
"""

from __future__ import annotations

from pipeline.core import paths
from pipeline.core.arm_registry import ARMS
from pipeline.core.entry import stage_main
from pipeline.core.errors import UserError
from pipeline.core.files import write_json, write_text
from pipeline.core.logs import stage_log as log
from pipeline.core.params_yaml import load_params
from pipeline.data.images import load_split
from pipeline.data.subsets import sweep_sizes, sweep_train_set
from pipeline.results.curve_results import aggregate, baselines, curve_csv, read_points, validation_csv
from pipeline.results.figures import plot_data_hunger, plot_validation
from pipeline.results.stats import curve_comparisons, with_holm
from pipeline.tracking.tracker import stage_tracker


@stage_main
def main() -> None:
    params = load_params()
    summaries = read_points(params.data_hunger.points)
    sizes = [s["n_train_per_class"] for s in summaries[ARMS[0]]]
    train_all = sweep_train_set(params.preset, "scratch")
    if sizes != sweep_sizes(params.data_hunger, params.preset, train_all.labels, len(train_all.classes)):
        raise UserError(f"the sweep's sizes {sizes} do not match params.yaml's; rerun `dvc repro`")
    test_set = load_split(paths.prepared_split("scratch", "test"))
    cfg = params.data_hunger
    base = baselines(train_all, test_set, sizes, cfg.logreg_max_per_class, params.seeds)
    metrics = aggregate(summaries, base, cfg.plateau_window)
    metrics["preset"] = params.preset
    write_json(paths.METRICS / "data_hunger.json", metrics)
    ran = dict(zip(cfg.points, sizes, strict=True))  # a primary point this sweep does not run is left out
    primary = {pair: [str(ran[p]) for p in cfg.primary_points if p in ran] for pair in cfg.primary_comparisons}
    comparisons = curve_comparisons({arm: metrics[arm] for arm in ARMS})
    unstated = sorted(set(primary) - set(comparisons))
    if unstated:
        raise UserError(f"params.yaml: data_hunger.primary_comparisons {unstated} are not among the stated "
                        f"comparisons {sorted(comparisons)}; name pairs from that list")  # fmt: skip
    comparisons = with_holm(comparisons, primary=primary)
    write_json(paths.METRICS / "comparisons.json", {"confidence": 0.95, "paired_by": "seed", "test": "t, n - 1 df",
                                                     "multiplicity": "Holm over every curve comparison, 0.05",
                                                     "primary": primary, "primary_multiplicity":
                                                     f"Holm over the {sum(map(len, primary.values()))} primary "
                                                     "comparisons, 0.05 (holm_primary)",
                                                     "seeds": params.seeds, "curve": comparisons})  # fmt: skip
    title = (f"{params.preset}: test accuracy vs training images per class ({len(params.seeds)} seeds, own "
             f"subsets; early stopping on {metrics['n_val']} validation images)")  # fmt: skip
    plot_data_hunger(metrics, ARMS, title)
    write_text(paths.PLOTS / "data_hunger.csv", curve_csv(metrics, ARMS))
    write_text(paths.PLOTS / "validation.csv", validation_csv(summaries))
    plot_validation(summaries)
    with stage_tracker(params, "data_hunger") as tracker:  # each arm's curve: test accuracy at step = images/class
        for arm in ARMS:
            for n, value in metrics[arm].items():
                tracker.log_metrics({f"curve.{arm}": value["mean"], f"curve.{arm}.std": value["std"]}, step=int(n))
        tracker.log_artifact(paths.METRICS / "data_hunger.json")
        tracker.log_artifact(paths.PLOTS / "data_hunger.png")
        tracker.log_artifact(paths.PLOTS / "validation.png")
    for arm in ARMS:
        row = ", ".join(f"{n}: {v['mean']:.3f}" for n, v in metrics[arm].items())
        log.info(f"data_hunger {arm}: {row}")


if __name__ == "__main__":
    main()
