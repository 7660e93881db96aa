"""Prints the headline results table (markdown) from metrics/evaluate.json: `python -m pipeline.report`."""

from __future__ import annotations

import json

from pipeline import paths
from pipeline.errors import UserError, stage_main

ARM_NAMES = {"scratch": "ViT from scratch", "pretrained": "Pretrained ViT, frozen + new linear head"}


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
    for arm, name in ARM_NAMES.items():
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


@stage_main
def main() -> None:
    path = paths.METRICS / "evaluate.json"
    if not path.is_file():
        raise UserError(f"{path} is missing; run `dvc repro` (or `dvc pull`) first")
    print(results_table(json.loads(path.read_text())))


if __name__ == "__main__":
    main()
