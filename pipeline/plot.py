"""Stage plot: the PNGs a person looks at, from the training histories, metrics/evaluate.json and
metrics/ablation.json."""

from __future__ import annotations

import json

import numpy as np

from pipeline import paths
from pipeline.errors import UserError, stage_main
from pipeline.files import atomic_path
from pipeline.history import read_history

COLOURS = {"scratch": "tab:red", "pretrained": "tab:blue"}
LABELS = {"scratch": "ViT from scratch", "pretrained": "pretrained ViT, frozen + linear head"}


def read_input(path) -> str:
    """An input of this stage, or one line saying which stage makes it."""
    if not path.is_file():
        raise UserError(f"{path} is missing; run `dvc repro`, which makes the plot stage's inputs first")
    return path.read_text()


def save(figure, name: str) -> None:
    with atomic_path(paths.PLOTS / name) as tmp:
        figure.savefig(tmp, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})


def plot_curves(plt, histories: dict[str, list[dict]], baselines: dict) -> None:
    figure, axes = plt.subplots(1, 2, figsize=(11, 4))
    for arm, rows in histories.items():
        for seed in sorted({r["seed"] for r in rows}):
            seed_rows = [r for r in rows if r["seed"] == seed]
            epochs = [r["epoch"] for r in seed_rows]
            for axis, key in zip(axes, ("loss", "acc"), strict=True):
                first = seed == rows[0]["seed"]
                axis.plot(epochs, [r[f"test_{key}"] for r in seed_rows], color=COLOURS[arm],
                          label=f"{LABELS[arm]}: test" if first else None)  # fmt: skip
                axis.plot(epochs, [r[f"train_{key}"] for r in seed_rows], color=COLOURS[arm], linestyle=":",
                          alpha=0.7, label=f"{LABELS[arm]}: train" if first else None)  # fmt: skip
    axes[1].axhline(baselines["chance"], color="grey", linestyle="--", label="chance")
    axes[0].set(xlabel="epoch", ylabel="cross-entropy loss", title="Loss (one line per seed)")
    axes[1].set(xlabel="epoch", ylabel="accuracy", title="Accuracy (one line per seed)", ylim=(0, 1.02))
    axes[1].legend(fontsize=7, loc="lower right")
    save(figure, "curves.png")
    plt.close(figure)


def plot_confusion(plt, matrices: dict) -> None:
    classes = matrices["classes"]
    figure, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    for axis, (arm, per_seed) in zip(axes, matrices["matrices"].items(), strict=True):
        total = np.sum([np.array(m) for m in per_seed.values()], axis=0)
        axis.imshow(total, cmap="Blues")
        for (row, col), count in np.ndenumerate(total):
            axis.text(col, row, str(count), ha="center", va="center",
                      color="white" if count > total.max() / 2 else "black")  # fmt: skip
        axis.set(xticks=range(len(classes)), yticks=range(len(classes)), xlabel="predicted", ylabel="actual",
                 title=f"{LABELS[arm]}\n(summed over {len(per_seed)} seeds)")  # fmt: skip
        axis.set_xticklabels(classes, rotation=30, ha="right")
        axis.set_yticklabels(classes)
    save(figure, "confusion.png")
    plt.close(figure)


def plot_comparison(plt, metrics: dict) -> None:
    figure, axis = plt.subplots(figsize=(6.5, 4.2))
    for x, arm in enumerate(paths.ARMS):
        acc = metrics[arm]["test_acc"]
        axis.bar(x, acc["mean"], yerr=acc["std"], color=COLOURS[arm], alpha=0.8, capsize=6)
        axis.scatter([x] * len(acc["per_seed"]), acc["per_seed"], color="black", s=12, zorder=3)
        axis.text(x, acc["mean"] + acc["std"] + 0.02, f"{acc['mean']:.3f}", ha="center")
    styles = {"chance": ":", "majority": "--", "pixels_logreg": "-."}
    for name, value in metrics["baselines"].items():
        axis.axhline(value, color="grey", linestyle=styles[name], label=f"{name} {value:.3f}")
    axis.set_xticks(range(len(paths.ARMS)), [LABELS[a] for a in paths.ARMS], fontsize=8)
    axis.set(ylabel="test accuracy (per image)", ylim=(0, 1.05),
             title=f"{metrics['preset']}: {metrics['n_train']} training images, {metrics['n_test']} test")  # fmt: skip
    axis.legend(fontsize=8, loc="upper left")
    save(figure, "comparison.png")
    plt.close(figure)


def plot_size(plt, metrics: dict) -> None:
    figure, axis = plt.subplots(figsize=(6, 4))
    for arm in paths.ARMS:
        size, acc = metrics[arm]["file_size_mb"], metrics[arm]["test_acc"]
        axis.errorbar(size["model"], acc["mean"], yerr=acc["std"], fmt="o", color=COLOURS[arm],
                      capsize=4, label=f"{LABELS[arm]} (whole model)")  # fmt: skip
        axis.errorbar(size["head"], acc["mean"], yerr=acc["std"], fmt="s", mfc="none", color=COLOURS[arm],
                      capsize=4, label=f"{LABELS[arm]} (head file only)")  # fmt: skip
    axis.set_xscale("log")
    axis.set(xlabel="file size (MB, log scale)", ylabel="test accuracy", ylim=(0, 1.05), title="Accuracy vs file size")
    axis.legend(fontsize=7)
    save(figure, "size_vs_accuracy.png")
    plt.close(figure)


def plot_ablation(plt, ablation: dict, metrics: dict) -> None:
    """Test accuracy of each recipe variant of the from-scratch ViT, against the pretrained arm."""
    order = ablation["order"]
    figure, axis = plt.subplots(figsize=(7, 4.2))
    for x, variant in enumerate(order):
        acc = ablation["variants"][variant]["test_acc"]
        axis.bar(x, acc["mean"], yerr=acc["std"], color=COLOURS["scratch"], alpha=0.8, capsize=6)
        axis.scatter([x] * len(acc["per_seed"]), acc["per_seed"], color="black", s=12, zorder=3)
        axis.text(x, acc["mean"] + acc["std"] + 0.02, f"{acc['mean']:.3f}", ha="center")
    pretrained = metrics["pretrained"]["test_acc"]["mean"]
    axis.axhline(pretrained, color=COLOURS["pretrained"], label=f"{LABELS['pretrained']} {pretrained:.3f}")
    styles = {"chance": ":", "majority": "--", "pixels_logreg": "-."}
    for name, value in ablation["baselines"].items():
        axis.axhline(value, color="grey", linestyle=styles[name], label=f"{name} {value:.3f}")
    axis.set_xticks(range(len(order)), order, fontsize=8)
    axis.set(xlabel="recipe (seed | paper) + options (aug: crop and flip, mean: mean-pooled patch tokens)",
             ylabel="test accuracy (per image)", ylim=(0, 1.05),
             title=f"ViT from scratch, {ablation['n_train']} training images, "
                   f"{ablation['steps']} steps of {ablation['batch_size']}")  # fmt: skip
    axis.legend(fontsize=7, loc="upper left")
    save(figure, "ablation.png")
    plt.close(figure)


@stage_main
def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = json.loads(read_input(paths.METRICS / "evaluate.json"))
    matrices = json.loads(read_input(paths.CONFUSION / "matrices.json"))
    histories = {arm: read_history(read_input(paths.HISTORY / f"{arm}_seeds.csv")) for arm in paths.ARMS}
    ablation = json.loads(read_input(paths.METRICS / "ablation.json"))
    plot_curves(plt, histories, metrics["baselines"])
    plot_confusion(plt, matrices)
    plot_comparison(plt, metrics)
    plot_size(plt, metrics)
    plot_ablation(plt, ablation, metrics)
    print(
        f"plot: wrote curves.png, confusion.png, comparison.png, size_vs_accuracy.png, ablation.png to {paths.PLOTS}/"
    )


if __name__ == "__main__":
    main()
