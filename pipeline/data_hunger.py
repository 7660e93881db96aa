"""Stage data_hunger: the sweep's points gathered into metrics/data_hunger.json and plots/data_hunger.png.

The paper's point is a curve: pretraining matters most when data is scarce, and the gap closes as
data grows. The JSON is ``{arm: {n_train_per_class: {mean, std, per_seed}}}`` (test accuracy over the
whole test set) plus ``baselines`` per size: chance, the majority training class and, up to
``data_hunger.logreg_max_per_class``, a logistic regression on raw pixels fit on the same nested subset.
"""

from __future__ import annotations

import json

from pipeline import paths
from pipeline.config import SWEEP_POINTS, load_params
from pipeline.data import ImageSet, load_split
from pipeline.errors import UserError, stage_main
from pipeline.files import atomic_path, write_json
from pipeline.metrics import majority_baseline, pixels_logreg
from pipeline.sweep import ARMS, nested_indices, point_path, sweep_sizes, sweep_train_set

COLOURS = {"scratch": "tab:red", "cnn": "tab:orange", "linear": "tab:blue", "finetune": "tab:green"}
LABELS = {
    "scratch": "ViT from scratch",
    "cnn": "small ResNet from scratch",
    "linear": "pretrained, frozen + linear head",
    "finetune": "pretrained, fine-tuned",
}


def parameter_count(n: int) -> str:
    return f"{n / 1e6:.2g}M" if n >= 100_000 else f"{n:,}"


def read_points(arms=ARMS, points: int = SWEEP_POINTS) -> dict[str, list[dict]]:
    """Every point's summary, per arm, in size order."""
    summaries = {}
    for arm in arms:
        summaries[arm] = []
        for point in range(points):
            path = point_path(arm, point)
            if not path.is_file():
                raise UserError(f"{path} is missing; run `dvc repro` (the sweep stages make it)")
            summaries[arm].append(json.loads(path.read_text()))
    return summaries


def baselines(train_all: ImageSet, test_set: ImageSet, sizes: list[int], logreg_max: int) -> dict[str, dict]:
    """Chance, majority and (up to ``logreg_max`` per class) raw-pixel logistic regression at each size,
    on the sweep's nested subsets. Larger sizes leave ``pixels_logreg`` out: sklearn's lbfgs takes minutes."""
    result = {}
    for n in sizes:
        index = nested_indices(train_all.labels, n)
        images, labels = train_all.images[index], train_all.labels[index]
        result[str(n)] = {"chance": 1 / len(test_set.classes), "majority": majority_baseline(labels, test_set.labels)}
        if n <= logreg_max:
            result[str(n)]["pixels_logreg"] = pixels_logreg(images, labels, test_set.images, test_set.labels)
    return result


def aggregate(summaries: dict[str, list[dict]], baseline: dict[str, dict]) -> dict:
    """``{arm: {n: {mean, std, per_seed}}}`` of test accuracy, with the baselines and the run settings."""
    result: dict = {
        arm: {str(s["n_train_per_class"]): s["test_acc"] for s in points} for arm, points in summaries.items()
    }
    first = next(iter(summaries.values()))[0]
    result["baselines"] = baseline
    result["trained_parameters"] = {arm: points[0]["trained_parameters"] for arm, points in summaries.items()}
    result["n_test"] = first["n_test"]
    result["steps"] = first["steps"]
    result["batch_size"] = first["batch_size"]
    return result


def plot(metrics: dict, arms, title: str) -> None:
    """Test accuracy against training images per class (log x): mean line, mean ± std band per arm."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4.5))
    for arm in arms:
        sizes = sorted(metrics[arm], key=int)
        x = [int(n) for n in sizes]
        mean = [metrics[arm][n]["mean"] for n in sizes]
        std = [metrics[arm][n]["std"] for n in sizes]
        label = f"{LABELS[arm]} ({parameter_count(metrics['trained_parameters'][arm])} trained params)"
        axis.plot(x, mean, "o-", color=COLOURS[arm], label=label)
        low, high = [m - s for m, s in zip(mean, std, strict=True)], [m + s for m, s in zip(mean, std, strict=True)]
        axis.fill_between(x, low, high, color=COLOURS[arm], alpha=0.2, linewidth=0)
    sizes = sorted(metrics["baselines"], key=int)
    x = [int(n) for n in sizes]
    base = metrics["baselines"]
    fitted = [n for n in sizes if "pixels_logreg" in base[n]]
    if fitted:
        axis.plot([int(n) for n in fitted], [base[n]["pixels_logreg"] for n in fitted], "s-.", color="grey",
                  label="logistic regression on pixels")  # fmt: skip
    axis.plot(x, [base[n]["majority"] for n in sizes], "--", color="black", alpha=0.6, label="majority class")
    axis.axhline(base[sizes[0]]["chance"], color="grey", linestyle=":", label="chance")
    axis.set_xscale("log")
    axis.set(xlabel="training images per class (log scale)", ylabel="test accuracy (per image)", ylim=(0, 1.02),
             title=title)  # fmt: skip
    axis.legend(fontsize=8, loc="lower right")
    with atomic_path(paths.PLOTS / "data_hunger.png") as tmp:
        figure.savefig(tmp, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})
    plt.close(figure)


@stage_main
def main() -> None:
    params = load_params()
    summaries = read_points()
    sizes = [s["n_train_per_class"] for s in summaries[ARMS[0]]]
    train_all = sweep_train_set(params, "scratch")
    if sizes != sweep_sizes(params, train_all.labels, len(train_all.classes)):
        raise UserError(f"the sweep's sizes {sizes} do not match params.yaml's; rerun `dvc repro`")
    test_set = load_split(paths.prepared_split("scratch", "test"))
    metrics = aggregate(summaries, baselines(train_all, test_set, sizes, params.data_hunger.logreg_max_per_class))
    metrics["preset"] = params.preset
    write_json(paths.METRICS / "data_hunger.json", metrics)
    seeds = len(summaries[ARMS[0]][0]["test_acc"]["per_seed"])
    title = (f"{params.preset}: test accuracy vs training-set size "
             f"({metrics['steps']} steps of {metrics['batch_size']} per run, {seeds} seeds)")  # fmt: skip
    plot(metrics, ARMS, title)
    for arm in ARMS:
        row = ", ".join(f"{n}: {v['mean']:.3f}" for n, v in metrics[arm].items())
        print(f"data_hunger {arm}: {row}")


if __name__ == "__main__":
    main()
