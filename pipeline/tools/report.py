"""Prints the README's results tables (markdown) from the committed metrics: `python -m pipeline.tools.report`.

The headline table comes from metrics/evaluate.json, the data-hunger curve from metrics/data_hunger.json
and the recipe ablation from metrics/ablation.json (beside the linear arm of evaluate.json).
"""

from __future__ import annotations

import json

from pipeline import paths
from pipeline.errors import UserError, stage_main
from pipeline.plotting import LABELS

VARIANT_PARTS = {
    "seed": "seed 000's optimiser (Adam, constant lr, L2 weight decay, no clipping)",
    "paper": "paper's optimiser (AdamW, warmup + cosine, clipping)",
    "aug": "crop/flip",
    "mean": "mean pooling",
}


def mean_std(value: dict) -> str:
    return f"{value['mean']:.3f} ± {value['std']:.3f}"


def results_table(metrics: dict) -> str:
    """The arms beside the baselines, as a markdown table."""
    seeds = len(metrics["scratch"]["test_acc"]["per_seed"])
    lines = [
        f"Preset `{metrics['preset']}`: classes {', '.join(metrics['classes'])}; {metrics['n_train']} training and "
        f"{metrics['n_test']} test images; {seeds} seeds; {metrics.get('runtime', '')}.",
        "",
        "| model | test accuracy (mean ± std) | per seed | test loss | collapse | trainable / total params "
        "| file MB (model / head) |",
        "|---|---|---|---|---|---|---|",
    ]
    for arm, name in ((arm, LABELS[arm]) for arm in paths.HEADLINE_VIEWS):
        m = metrics[arm]
        acc, loss = m["test_acc"], m["test_loss"]
        per_seed = ", ".join(f"{a:.3f}" for a in acc["per_seed"])
        lines.append(
            f"| {name} | **{acc['mean']:.3f} ± {acc['std']:.3f}** | {per_seed} | {loss['mean']:.3f} "
            f"| {m['collapse']:.2f} | {m['params']['trainable']:,} / {m['params']['total']:,} "
            f"| {m['file_size_mb']['model']:.2f} / {m['file_size_mb']['head']:.3f} |"
        )
    baselines = metrics["baselines"]
    lines.append(f"| Logistic regression on raw pixels (same images) | {baselines['pixels_logreg']:.3f} | | | | | |")
    lines.append(f"| Majority training class | {baselines['majority']:.3f} | | | | | |")
    lines.append(f"| Chance | {baselines['chance']:.3f} | | | | | |")
    return "\n".join(lines)


def curve_table(curve: dict) -> str:
    """Test accuracy per arm and training-set size; the best arm of each size in bold."""
    arms = [arm for arm in LABELS if arm in curve]
    lines = [
        "| per class | " + " | ".join(LABELS[arm] for arm in arms) + " | pixels logreg |",
        "|---" * (len(arms) + 2) + "|",
    ]
    for size in sorted(curve[arms[0]], key=int):
        best = max(arms, key=lambda arm: curve[arm][size]["mean"])
        cells = [f"**{mean_std(curve[arm][size])}**" if arm == best else mean_std(curve[arm][size]) for arm in arms]
        logreg = curve["baselines"][size].get("pixels_logreg")
        cells.append(f"{logreg:.3f}" if logreg is not None else "(not fit)")
        lines.append(f"| {size} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def describe_variant(variant: str) -> str:
    recipe, *options = variant.split("+")
    return " + ".join(VARIANT_PARTS[part] for part in (recipe, *options))


def ablation_table(ablation: dict, metrics: dict) -> str:
    """Each recipe variant of the from-scratch ViT, then the linear arm and the baselines."""
    lines = [
        "| variant | recipe | test accuracy (mean ± std) | per seed | collapse | final train loss |",
        "|---|---|---|---|---|---|",
    ]
    for variant in ablation["order"]:
        result = ablation["variants"][variant]
        per_seed = ", ".join(f"{a:.3f}" for a in result["test_acc"]["per_seed"])
        lines.append(
            f"| `{variant}` | {describe_variant(variant)} | **{mean_std(result['test_acc'])}** | {per_seed} "
            f"| {result['collapse']['mean']:.2f} | {result['train_loss']['mean']:.3f} |"
        )
    linear = mean_std(metrics["linear"]["test_acc"])
    lines.append(f"| (reference) | {LABELS['linear']} (evaluate stage) | {linear} | | | |")
    for name, value in ablation["baselines"].items():
        lines.append(f"| (baseline) | {name.replace('_', ' ')} | {value:.3f} | | | |")
    return "\n".join(lines)


def read_metrics(name: str) -> dict:
    path = paths.METRICS / name
    if not path.is_file():
        raise UserError(f"{path} is missing; run `dvc repro` (or `dvc pull`) first")
    return json.loads(path.read_text())


@stage_main
def main() -> None:
    metrics = read_metrics("evaluate.json")
    print(results_table(metrics))
    curve = read_metrics("data_hunger.json")
    print(f"\nData-hunger curve: test accuracy, {curve['steps']} steps of {curve['batch_size']} per run\n")
    print(curve_table(curve))
    ablation = read_metrics("ablation.json")
    print(f"\nRecipe ablation: ViT from scratch on {ablation['n_train']} images, {ablation['steps']} steps of "
          f"{ablation['batch_size']}\n")  # fmt: skip
    print(ablation_table(ablation, metrics))


if __name__ == "__main__":
    main()
