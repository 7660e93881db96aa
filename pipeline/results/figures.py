"""Every PNG drawn from metrics files (JSON and CSV), and the one way PNGs are saved (atomically, without a
timestamp, so reruns give the same bytes). The attention maps, drawn from a model's tensors, are in
:mod:`pipeline.results.attention_figures`."""

from __future__ import annotations

import textwrap

import numpy as np

from pipeline.core import paths
from pipeline.core.arm_registry import DECAY_VARIANTS, REGISTRY, TABLE_ORDER
from pipeline.core.files import atomic_path


def pyplot():
    """matplotlib's pyplot on the Agg backend (files only, no display), imported when a stage draws."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def parameter_count(n: int) -> str:
    """A parameter count for a legend: ``1.2M``, or ``12,345`` below 100,000."""
    return f"{n / 1e6:.2g}M" if n >= 100_000 else f"{n:,}"


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
                axis.plot(epochs, [r[f"val_{key}"] for r in seed_rows], color=REGISTRY[arm].colour,
                          label=f"{REGISTRY[arm].label}: validation" if first else None)  # fmt: skip
                axis.plot(epochs, [r[f"train_{key}"] for r in seed_rows], color=REGISTRY[arm].colour, linestyle=":",
                          alpha=0.7, label=f"{REGISTRY[arm].label}: train" if first else None)  # fmt: skip
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
                 title=f"{REGISTRY[arm].label}\n(summed over {len(per_seed)} seeds)")  # fmt: skip
        axis.set_xticklabels(classes, rotation=30, ha="right")
        axis.set_yticklabels(classes)
    save(figure, "confusion.png")
    plt.close(figure)


def plot_comparison(plt, metrics: dict) -> None:
    """Seed 000's two arms as the seed ran them, then every arm of the protocol at the headline size."""
    figure, axis = plt.subplots(figsize=(9, 4.4))
    protocol = metrics["protocol"]
    bars = [(arm, metrics[arm]["test_acc"], "seed 000's recipe") for arm in paths.HEADLINE_VIEWS]
    bars += [(arm, protocol[arm], "protocol") for arm in TABLE_ORDER]
    for x, (arm, acc, kind) in enumerate(bars):
        axis.bar(x, acc["mean"], yerr=acc["std"], color=REGISTRY[arm].colour, alpha=0.8 if kind == "protocol" else 0.45,
                 capsize=5, hatch=None if kind == "protocol" else "//")  # fmt: skip
        axis.scatter([x] * len(acc["per_seed"]), acc["per_seed"], color="black", s=10, zorder=3)
        axis.text(x, acc["mean"] + acc["std"] + 0.02, f"{acc['mean']:.3f}", ha="center", fontsize=8)
    styles = {"chance": ":", "majority": "--", "pixels_logreg": "-."}
    for name, value in metrics["baselines"].items():
        axis.axhline(value, color="grey", linestyle=styles[name], label=f"{name} {value:.3f}")
    names = [f"{REGISTRY[arm].label}\n({'seed 000' if kind != 'protocol' else 'protocol'})" for arm, _, kind in bars]
    axis.set_xticks(range(len(bars)), names, fontsize=6.5, rotation=25, ha="right")
    axis.axvline(len(paths.HEADLINE_VIEWS) - 0.5, color="black", linewidth=0.8)
    axis.set(ylabel="test accuracy (per image)", ylim=(0, 1.05),
             title=f"{metrics['preset']}: {protocol['n_train_per_class']} training images per class, "
                   f"{metrics['n_test']} test; left: seed 000's recipe, right: the protocol")  # fmt: skip
    axis.title.set_fontsize(8)
    axis.legend(fontsize=7, loc="upper left")
    save(figure, "comparison.png")
    plt.close(figure)


def plot_size(plt, metrics: dict) -> None:
    figure, axis = plt.subplots(figsize=(6, 4))
    for arm in paths.HEADLINE_VIEWS:
        size, acc = metrics[arm]["file_size_mb"], metrics[arm]["test_acc"]
        axis.errorbar(size["model"], acc["mean"], yerr=acc["std"], fmt="o", color=REGISTRY[arm].colour,
                      capsize=4, label=f"{REGISTRY[arm].label} (whole model)")  # fmt: skip
        axis.errorbar(size["head"], acc["mean"], yerr=acc["std"], fmt="s", mfc="none", color=REGISTRY[arm].colour,
                      capsize=4, label=f"{REGISTRY[arm].label} (head file only)")  # fmt: skip
    axis.set_xscale("log")
    axis.set(xlabel="file size (MB, log scale)", ylabel="test accuracy", ylim=(0, 1.05), title="Accuracy vs file size")
    axis.legend(fontsize=7)
    save(figure, "size_vs_accuracy.png")
    plt.close(figure)


SERIES = ("weight_rms", "attention0_rms", "train_loss", "val_loss")  # the ablation's per-epoch series


def epochs_csv(epochs: dict[str, list[dict]]) -> str:
    """The ablation per epoch (``plots/ablation.csv``, for `dvc plots`): ``epoch,<variant>_<series>...``,
    one row per epoch (0 = initialisation, which has no loss yet), means over seeds."""
    columns = [f"{variant}_{key}" for variant in epochs for key in SERIES]
    rows = ["epoch," + ",".join(columns)]
    for i in range(len(next(iter(epochs.values())))):
        values = [epochs[v][i].get(k) for v in epochs for k in SERIES]
        rows.append(f"{i}," + ",".join("" if x is None else f"{x:.6g}" for x in values))
    return "\n".join(rows) + "\n"


def read_epochs_csv(text: str) -> dict[str, list[float | None]]:
    import csv
    import io

    rows = list(csv.DictReader(io.StringIO(text)))
    return {key: [float(r[key]) if r[key] else None for r in rows] for key in rows[0]}


def plot_ablation(plt, ablation: dict, series: dict[str, list[float | None]]) -> None:
    """The collapse, isolated: each decay variant's weight RMS and train loss per epoch, test accuracy in the
    legend (mean over seeds)."""
    figure, axes = plt.subplots(1, 2, figsize=(11, 4))
    for variant in ablation["order"]:
        acc = ablation["variants"][variant]["test_acc"]
        label = f"{variant}: test {acc['mean']:.3f}, collapse {ablation['variants'][variant]['collapse']['mean']:.2f}"
        colour = DECAY_VARIANTS[variant].colour
        axes[0].plot(series["epoch"], series[f"{variant}_weight_rms"], "o-", color=colour, label=label)
        epochs = [e for e, v in zip(series["epoch"], series[f"{variant}_train_loss"], strict=True) if v is not None]
        losses = [v for v in series[f"{variant}_train_loss"] if v is not None]
        axes[1].plot(epochs, losses, "o-", color=colour, label=variant)
    axes[0].set_yscale("log")
    axes[0].set(xlabel="epoch (0: initialisation)", ylabel="RMS of the weight matrices (log)",
                title=f"Weights (lr {ablation['lr']:g}, decay {ablation['weight_decay']:g})")  # fmt: skip
    axes[1].axhline(float(np.log(len(ablation.get("classes", [0, 0, 0])))), color="grey", linestyle=":",
                    label="ln K (a constant prediction)")  # fmt: skip
    axes[1].set(xlabel="epoch", ylabel="train cross-entropy", title=f"{ablation['n_train']} training images")
    for axis in axes:
        axis.legend(fontsize=7)
    save(figure, "ablation.png")
    plt.close(figure)


def plot_data_hunger(metrics: dict, arms, title: str) -> None:
    """Test accuracy against training images per class (log x): mean line, mean ± std band per arm."""
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(7, 4.5))
    for arm in arms:
        sizes = sorted(metrics[arm], key=int)
        x = [int(n) for n in sizes]
        mean = [metrics[arm][n]["mean"] for n in sizes]
        std = [metrics[arm][n]["std"] for n in sizes]
        label = f"{REGISTRY[arm].label} ({parameter_count(metrics['trained_parameters'][arm])} trained params)"
        axis.plot(x, mean, "o-", color=REGISTRY[arm].colour, label=label)
        low, high = [m - s for m, s in zip(mean, std, strict=True)], [m + s for m, s in zip(mean, std, strict=True)]
        axis.fill_between(x, low, high, color=REGISTRY[arm].colour, alpha=0.2, linewidth=0)
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
    axis.set(xlabel="training images per class (log scale)", ylabel="test accuracy (per image)", ylim=(0, 1.02))
    axis.set_title(textwrap.fill(title, 75), fontsize=10)  # the README's figure: its title fits its width
    axis.legend(fontsize=8, loc="lower right")
    save(figure, "data_hunger.png")
    plt.close(figure)


def plot_validation(summaries: dict[str, list[dict]]) -> None:
    """Every trained arm's validation accuracy (the selection rule's first key) against the share of its budget
    at each size (first seed, chosen learning rate), the kept step marked: what the validation rule saw when it
    stopped each run."""
    plt = pyplot()
    trained = {arm: points for arm, points in summaries.items() if "lr" in points[0]}
    figure, axes = plt.subplots(1, len(trained), figsize=(4.2 * len(trained), 3.8), squeeze=False, sharey=True)
    cmap = plt.get_cmap("viridis")
    for axis, (arm, points) in zip(axes[0], trained.items(), strict=True):
        for index, point in enumerate(points):
            run = next(iter(point["runs"].values()))
            budget = run["budget"]
            shares = [r["step"] / budget for r in run["curve"]]
            colour = cmap(index / max(1, len(points) - 1))
            axis.plot(shares, [r["val_acc"] for r in run["curve"]], color=colour,
                      label=f"{point['n_train_per_class']}/class, lr {run['lr']:g}, {budget} steps")  # fmt: skip
            axis.plot([run["best_step"] / budget], [run["val_acc"]], "o", color=colour)
        axis.set(title=REGISTRY[arm].label, xlabel="share of the run's budget (steps / cap)", xlim=(0, 1.02))
        axis.legend(fontsize=7)
    axes[0][0].set(ylabel="validation accuracy")
    figure.suptitle("Validation accuracy per run (first seed); the dot is the kept, best-validation score", fontsize=9)
    save(figure, "validation.png")
    plt.close(figure)


def plot_pretraining_scale(metrics: dict) -> None:
    """The paper's Figure 4 in miniature: few-shot test accuracy against pretraining images, ViT against
    ResNet, one panel per number of shots; the masked-patch ViTs as points, the pixel probe as a line."""
    plt = pyplot()
    shots = list(metrics["pixels"])
    figure, axes = plt.subplots(1, len(shots), figsize=(4.2 * len(shots), 3.8), squeeze=False, sharey=True)
    styles = {
        "vit": ("tab:blue", "o-", "ViT (supervised)"),
        "resnet": ("tab:orange", "s-", "small ResNet (supervised)"),
    }
    # the masked-patch ViT's points: the default (pool + target images, filled) and its pool-only twin (hollow)
    which = {str(n): images for images, n in metrics.get("vit_masked_patch_sizes", {}).items()}
    masked_labels = {"all": "pool + target images", "pool": "pool only"}
    for axis, shot in zip(axes[0], shots, strict=True):
        for arch, (colour, style, label) in styles.items():
            sizes = sorted(metrics[arch], key=int)
            mean = [metrics[arch][n][shot]["mean"] for n in sizes]
            std = [metrics[arch][n][shot]["std"] for n in sizes]
            params = parameter_count(metrics["trained_parameters"][arch])
            axis.errorbar([int(n) for n in sizes], mean, yerr=std, fmt=style, color=colour, capsize=3,
                          markersize=5, label=f"{label}, {params}")  # fmt: skip
        params = parameter_count(metrics["trained_parameters"]["vit_masked_patch"])
        for n, by_shots in sorted(metrics["vit_masked_patch"].items(), key=lambda item: int(item[0])):
            images = which.get(n, "all")
            axis.errorbar([int(n)], [by_shots[shot]["mean"]], yerr=[by_shots[shot]["std"]], fmt="*", capsize=3,
                          color="tab:purple", markerfacecolor="white" if images == "pool" else "tab:purple",
                          markersize=10, label=f"ViT (masked patches, {masked_labels[images]}), {params}")  # fmt: skip
        for n, by_shots in metrics.get("vit_masked_patch_long", {}).items():  # nudged right: same size as the default
            axis.errorbar([int(n) * 1.15], [by_shots[shot]["mean"]], yerr=[by_shots[shot]["std"]], fmt="D", capsize=3,
                          color="tab:red", markersize=6, label=f"ViT (masked patches, "
                          f"{metrics['vit_masked_patch_long_epochs']} epochs), {params}")  # fmt: skip
        pixels = metrics["pixels"][shot]
        axis.axhline(pixels["mean"], color="grey", linestyle="-.", label="few-shot probe on pixels")
        axis.set_xscale("log")
        axis.xaxis.set_minor_formatter("")  # a label on every minor tick of a short log axis overprints
        axis.set(title=f"{shot} images per target class", xlabel="pretraining images (log scale)")
    axes[0][0].set(ylabel="few-shot test accuracy (mean over seeds)")
    axes[0][-1].legend(fontsize=7, loc="lower right")
    figure.suptitle("Pretraining-set size (paper Fig. 4): few-shot linear probe on the target classes", fontsize=9)
    save(figure, "pretraining_scale.png")
    plt.close(figure)


def save_note(name: str, text: str) -> None:
    """A PNG that says why a plot has no data (e.g. a stage the preset does not run)."""
    plt = pyplot()
    figure = plt.figure(figsize=(6, 1.2))
    figure.text(0.5, 0.5, text, ha="center", va="center", fontsize=9, wrap=True)
    save(figure, name)
    plt.close(figure)
