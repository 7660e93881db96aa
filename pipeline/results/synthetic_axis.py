"""Issue 38's results: the synthetic axis beside Fashion-MNIST's, and hypotheses H1-H3 tested as docs/synthetic.md
wrote them before the first full run (each MET only if its whole paired 95% interval is above 0, and only with
every backbone it needs above the held-out floor)."""

from __future__ import annotations

import numpy as np
import torch

from pipeline.core.errors import UserError
from pipeline.results.figures import pyplot, save
from pipeline.results.headline import pretraining_slopes
from pipeline.results.stats import holm_verdicts, paired_difference

ARCHES = ("vit", "resnet")


def pixel_statistics(images: torch.Tensor) -> dict:
    """Pixel mean and standard deviation in [0, 1] and the filling rate (share of non-zero pixels per image) of
    uint8 images (N, 1, H, W)."""
    scaled = images.double() / 255
    fill = (images > 0).double().mean(dim=(1, 2, 3))
    return {"mean": scaled.mean().item(), "std": scaled.std().item(),
            "fill": {"mean": fill.mean().item(), "min": fill.min().item(), "max": fill.max().item()}}  # fmt: skip


def per_seed(point: dict, key: str = "test_acc") -> list[float]:
    return point[key]["per_seed"]


def same_seeds(seeds: list[int], other: list[int], what: str) -> None:
    """Paired lists must come from the same seeds in the same order (a per-seed list holds values only)."""
    if seeds != other:
        raise UserError(f"{what} ran seeds {other}, the study {seeds}; rerun the study after the default pipeline "
                        "with the same seeds")  # fmt: skip


def gather(pretrained: list[dict], finetuned: list[dict], fashion: dict, cnn: dict[str, dict], primary: int) -> dict:
    """metrics/synthetic.json from the study's items, the Fashion-MNIST axis (``fashion``:
    metrics/pretraining_scale.json, whose pixel probe H2 reads) and the small ResNet from scratch at the
    fine-tuned sizes (``cnn``: images per class -> the curve's point summary, H3's)."""
    scale = {arch: {} for arch in ARCHES}
    held_out = {arch: {} for arch in ARCHES}
    for item in pretrained:
        same_seeds(item["seeds"], fashion["seeds"], "metrics/pretraining_scale.json (H2's pixel probe)")
        scale[item["arch"]][str(item["n_pretrain"])] = item["few_shot"]
        held_out[item["arch"]][str(item["n_pretrain"])] = {k: item[k] for k in ("held_out_acc", "best_step", "used")}
    tuned = {arch: {} for arch in ARCHES}
    against_cnn = {arch: {} for arch in ARCHES}
    for item in finetuned:
        size = str(item["n_pretrain"])
        tuned[item["arch"]][size] = {arm: {n: point["test_acc"] for n, point in item[arm].items()}
                                     for arm in ("linear", "finetune")}  # fmt: skip
        for n in item["finetune"]:  # JSON sorts the runs' keys; both lists follow params' seeds
            same_seeds(sorted(item["seeds"]), sorted(int(seed) for seed in cnn[n]["runs"]),
                       f"the small ResNet at {n} per class")  # fmt: skip
        against_cnn[item["arch"]][size] = {n: paired_difference(per_seed(point), per_seed(cnn[n]))
                                           for n, point in item["finetune"].items()}  # fmt: skip
    slopes = pretraining_slopes(scale | {"pixels": fashion["pixels"]})
    largest = max(scale["vit"], key=int)
    headline = max(cnn, key=int)
    every_used = all(v["used"] for arch in ARCHES for v in held_out[arch].values())
    hypotheses = hypothesis_verdicts(
        {
            "H1": (slopes["vit-resnet"][str(primary)], every_used),
            "H2": (paired_difference(scale["vit"][largest][str(primary)]["per_seed"],
                                     fashion["pixels"][str(primary)]["per_seed"]), held_out["vit"][largest]["used"]),
            "H3": (against_cnn["vit"][largest][headline], held_out["vit"][largest]["used"]),
        },
        {
            "H1": f"the ViT's gain per decade of synthetic images minus the ResNet's, {primary}-shot probe",
            "H2": f"the ViT pretrained on {int(largest):,} images, {primary}-shot probe, minus the pixel probe",
            "H3": f"the ViT pretrained on {int(largest):,} images fine-tuned at {headline} per class minus the small "
            "ResNet from scratch on the same images",
        },
    )  # fmt: skip
    return {"few_shot": scale, "held_out": held_out, "slopes": slopes, "finetune": tuned,
            "finetune_against_cnn": against_cnn, "hypotheses": hypotheses, "primary_shots": primary,
            "fashion_mnist": {arch: fashion[arch] for arch in ARCHES} | {"pixels": fashion["pixels"]}}  # fmt: skip


def hypothesis_verdicts(differences: dict[str, tuple[dict, bool]], rules: dict[str, str]) -> dict:
    """Each hypothesis's paired difference, MET when its whole interval is above 0 and its backbones are used;
    Holm's step-down over them beside (a verdict of ``ahead`` under Holm)."""
    holm = holm_verdicts({name: {"": difference} for name, (difference, _) in differences.items()})
    return {name: {"rule": rules[name] + ": MET if the paired 95% interval is above 0", "difference": difference,
                   "backbones_used": used, "met": used and difference["low"] > 0,
                   "met_under_holm": used and holm[name][""] == "ahead"}
            for name, (difference, used) in differences.items()}  # fmt: skip


def scale_csv(metrics: dict) -> str:
    """``plots/synthetic_scale.csv`` for `dvc plots`: both axes, one row per source, backbone, size and shots."""
    rows = ["source,arch,n_pretrain,shots,test_acc,test_acc_std"]
    for source, key in (("synthetic", "few_shot"), ("fashion_mnist", "fashion_mnist")):
        for arch in ARCHES:
            for n, by_shots in sorted(metrics[key][arch].items(), key=lambda item: int(item[0])):
                rows += [f"{source},{arch},{n},{s},{v['mean']:.6g},{v['std']:.6g}" for s, v in by_shots.items()]
    return "\n".join(rows) + "\n"


def plot_scale(metrics: dict) -> None:
    """Few-shot test accuracy against pretraining images (log scale), one panel per number of shots: the
    synthetic backbones (solid) beside the Fashion-MNIST ones (dashed), the pixel probe as a line."""
    plt = pyplot()
    pixels = metrics["fashion_mnist"]["pixels"]
    shots = sorted(pixels, key=int)
    figure, axes = plt.subplots(1, len(shots), figsize=(4.4 * len(shots), 3.8), squeeze=False, sharey=True)
    colours = {"vit": "tab:blue", "resnet": "tab:orange"}
    names = {"vit": "ViT", "resnet": "small ResNet"}
    for axis, shot in zip(axes[0], shots, strict=True):
        for source, key, style in (("synthetic, equal steps", "few_shot", "o-"),
                                   ("Fashion-MNIST pool, equal epochs", "fashion_mnist", "s--")):  # fmt: skip
            for arch in ARCHES:
                sizes = sorted(metrics[key][arch], key=int)
                axis.errorbar([int(n) for n in sizes], [metrics[key][arch][n][shot]["mean"] for n in sizes],
                              yerr=[metrics[key][arch][n][shot]["std"] for n in sizes], fmt=style, capsize=3,
                              color=colours[arch], markersize=5, markerfacecolor="white" if "--" in style else None,
                              label=f"{names[arch]} ({source})")  # fmt: skip
        axis.axhline(pixels[shot]["mean"], color="grey", linestyle="-.", label="few-shot probe on pixels")
        axis.set_xscale("log")
        axis.xaxis.set_minor_formatter("")  # a label on every minor tick of a short log axis overprints
        axis.set(title=f"{shot} images per target class", xlabel="pretraining images (log scale)")
    axes[0][0].set(ylabel="few-shot test accuracy (mean over seeds)")
    axes[0][-1].legend(fontsize=7, loc="lower right")
    figure.suptitle("Pretraining-set size (paper Fig. 4) with synthetic fractal categories: few-shot linear probe",
                    fontsize=9)  # fmt: skip
    save(figure, "synthetic_scale.png")
    plt.close(figure)


def plot_examples(images: np.ndarray) -> None:
    """``plots/synthetic_examples.png``: a row per category, its first instances across (``images`` (rows,
    columns, H, W) uint8)."""
    plt = pyplot()
    rows, columns = images.shape[:2]
    figure, axes = plt.subplots(rows, columns, figsize=(columns * 0.9, rows * 0.9), squeeze=False)
    for (row, column), axis in np.ndenumerate(np.array(axes, dtype=object)):
        axis.imshow(images[row, column], cmap="gray", vmin=0, vmax=255)
        axis.set_axis_off()
    figure.suptitle("Synthetic categories (a row each) and their first instances", fontsize=9)
    save(figure, "synthetic_examples.png")
    plt.close(figure)
