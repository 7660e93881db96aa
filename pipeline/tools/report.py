"""Prints the README's results tables (markdown) from the committed metrics: `python -m pipeline.tools.report`
(or `vit-report`, or `make results`).

The headline table comes from metrics/evaluate.json (seed 000's two arms, then the protocol's arms at the
headline size), the data-hunger curve and its runs from metrics/data_hunger.json, and the collapse study
from metrics/ablation.json.
"""

from __future__ import annotations

import argparse
import json
import sys

from pipeline import paths
from pipeline.errors import UserError, stage_main
from pipeline.plotting import LABELS

VARIANTS = {
    "adam_l2": "Adam, decay 0.3 added to the gradient (L2): seed 000",
    "adamw": "AdamW, decay 0.3 decoupled (the paper's)",
    "adam_no_decay": "Adam, no decay",
}
TABLE_ORDER = ("scratch", "cnn", "pixels", "linear", "finetune")  # pipeline.arms.ARMS, from scratch to transfer


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
            f"| {name} (seed 000's recipe) | **{mean_std(acc)}** | {per_seed} | {loss['mean']:.3f} "
            f"| {m['collapse']:.2f} | {m['params']['trainable']:,} / {m['params']['total']:,} "
            f"| {m['file_size_mb']['model']:.2f} / {m['file_size_mb']['head']:.3f} |"
        )
    protocol = metrics["protocol"]
    for arm in TABLE_ORDER:
        acc = protocol[arm]
        per_seed = ", ".join(f"{a:.3f}" for a in acc["per_seed"])
        lines.append(f"| {LABELS[arm]} (protocol, {protocol['n_train_per_class']}/class) | **{mean_std(acc)}** "
                     f"| {per_seed} | | | | |")  # fmt: skip
    baselines = metrics["baselines"]
    logreg = baselines["pixels_logreg"]
    lines.append(f"| Logistic regression on raw pixels (same images, mean over seeds) | {logreg:.3f} | | | | | |")
    lines.append(f"| Majority training class | {baselines['majority']:.3f} | | | | | |")
    lines.append(f"| Chance | {baselines['chance']:.3f} | | | | | |")
    return "\n".join(lines)


def curve_table(curve: dict) -> str:
    """Test accuracy per arm and training-set size; the best arm of each size in bold."""
    arms = [arm for arm in TABLE_ORDER if arm in curve]
    lines = [
        "| per class | " + " | ".join(LABELS[arm] for arm in arms) + " | logistic regression on pixels |",
        "|---" * (len(arms) + 2) + "|",
    ]
    for size in sorted(curve[arms[0]], key=int):
        best = max(arms, key=lambda arm: curve[arm][size]["mean"])
        cells = [f"**{mean_std(curve[arm][size])}**" if arm == best else mean_std(curve[arm][size]) for arm in arms]
        logreg = curve["baselines"][size].get("pixels_logreg")
        cells.append(f"{logreg:.3f}" if logreg is not None else "(not fit)")
        lines.append(f"| {size} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def runs_table(curve: dict) -> str:
    """What the validation rule did: each trained arm's chosen lr, best step / steps run (mean over seeds) and
    final train loss; each probe's ridge."""
    trained = [arm for arm in TABLE_ORDER if arm in curve["runs"] and "lr" in next(iter(curve["runs"][arm].values()))]
    probes = [arm for arm in TABLE_ORDER if arm in curve["runs"] and arm not in trained]
    lines = [
        "| per class | " + " | ".join(f"{LABELS[arm]}: lr, best / last step, train loss" for arm in trained)
        + " | " + " | ".join(f"{LABELS[arm]}: ridge" for arm in probes) + " |",
        "|---" * (len(trained) + len(probes) + 1) + "|",
    ]  # fmt: skip
    for size in sorted(curve["runs"][trained[0]], key=int):
        cells = []
        for arm in trained:
            run = curve["runs"][arm][size]
            cells.append(f"{run['lr']:g}, {run['best_step']['mean']:.0f} / {run['steps']['mean']:.0f}, "
                         f"{run['train_loss']['mean']:.3f}")  # fmt: skip
        cells += [", ".join(f"{r:g}" for r in curve["runs"][arm][size].get("reg", [])) for arm in probes]
        lines.append(f"| {size} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def ablation_table(ablation: dict) -> str:
    """Each weight-decay variant of seed 000's recipe: accuracy, collapse, loss and the weights' RMS."""
    lines = [
        "| variant | optimiser | test accuracy (mean ± std) | per seed | collapse | final train loss "
        "| weight RMS: start -> end | layer-0 attention RMS: start -> end |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for variant in ablation["order"]:
        r = ablation["variants"][variant]
        per_seed = ", ".join(f"{a:.3f}" for a in r["test_acc"]["per_seed"])
        lines.append(
            f"| `{variant}` | {VARIANTS[variant]} | **{mean_std(r['test_acc'])}** | {per_seed} "
            f"| {r['collapse']['mean']:.2f} | {r['train_loss']['mean']:.3f} "
            f"| {r['weight_rms_initial']['mean']:.4f} -> {r['weight_rms']['mean']:.5f} "
            f"| {r['attention0_rms_initial']['mean']:.4f} -> {r['attention0_rms']['mean']:.5f} |"
        )
    return "\n".join(lines)


def read_metrics(name: str) -> dict:
    path = paths.METRICS / name
    if not path.is_file():
        raise UserError(f"{path} is missing; run `dvc repro` (or `dvc pull`) first")
    return json.loads(path.read_text())


def parse_args(argv: list[str]) -> argparse.Namespace:
    """No options: ``--help`` prints this module's docstring."""
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.tools.report",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return parser.parse_args(argv)


@stage_main
def main() -> None:
    parse_args(sys.argv[1:])
    metrics = read_metrics("evaluate.json")
    print(results_table(metrics))
    curve = read_metrics("data_hunger.json")
    print(f"\nData-hunger curve: test accuracy ({curve['n_test']} images), each seed its own subset, trained arms "
          f"stopped on {curve['n_val']} validation images\n")  # fmt: skip
    print(curve_table(curve))
    print("\nThe validation rule's choices\n")
    print(runs_table(curve))
    ablation = read_metrics("ablation.json")
    print(f"\nThe collapse, isolated: ViT from scratch on {ablation['n_train']} images, {ablation['epochs']} epochs at "
          f"lr {ablation['lr']:g}\n")  # fmt: skip
    print(ablation_table(ablation))


if __name__ == "__main__":
    main()
