"""The README's results table is generated from metrics/evaluate.json."""

import json
from pathlib import Path

from pipeline.tools.report import ablation_table, curve_table, results_table

REPO = Path(__file__).resolve().parents[2]


def test_results_table_shows_both_arms_and_baselines_from_the_committed_metrics():
    metrics = json.loads((REPO / "metrics/evaluate.json").read_text())
    table = results_table(metrics)
    scratch = metrics["scratch"]["test_acc"]
    assert f"**{scratch['mean']:.3f} ± {scratch['std']:.3f}**" in table
    assert f"| {metrics['baselines']['pixels_logreg']:.3f} |" in table
    assert table.count("\n| ") == 1 + 2 + 5 + 3  # header, seed 000's two arms, five protocol arms, three baselines
    fine = metrics["protocol"]["finetune"]
    assert f"**{fine['mean']:.3f} ± {fine['std']:.3f}**" in table


def test_curve_table_has_a_row_per_size_and_bolds_the_best_arm():
    def point(mean):
        return {"mean": mean, "std": 0.01, "per_seed": [mean]}

    curve = {
        "scratch": {"10": point(0.4), "100": point(0.7)},
        "cnn": {"10": point(0.5), "100": point(0.6)},
        "baselines": {"10": {"pixels_logreg": 0.55}, "100": {}},
    }
    table = curve_table(curve)
    rows = table.splitlines()
    assert rows[0] == "| per class | ViT from scratch | small ResNet from scratch | logistic regression on pixels |"
    assert rows[2] == "| 10 | 0.400 ± 0.010 | **0.500 ± 0.010** | 0.550 |"
    assert rows[3] == "| 100 | **0.700 ± 0.010** | 0.600 ± 0.010 | (not fit) |"


def test_ablation_table_keeps_the_variant_order_and_shows_the_weights_shrinking():
    def spread(mean):
        return {"mean": mean, "std": 0.0, "per_seed": [mean, mean]}

    result = {"test_acc": spread(0.5), "collapse": spread(0.4), "train_loss": spread(0.9),
              "weight_rms_initial": spread(0.06), "weight_rms": spread(0.0008),
              "attention0_rms_initial": spread(0.0624), "attention0_rms": spread(0.00079)}  # fmt: skip
    ablation = {"order": ["adamw", "adam_l2"], "variants": {"adam_l2": result, "adamw": result}}
    rows = ablation_table(ablation).splitlines()
    assert rows[2].startswith("| `adamw` | AdamW, decay 0.3 decoupled") and "**0.500 ± 0.000**" in rows[2]
    assert rows[3].startswith("| `adam_l2` | Adam, decay 0.3 added to the gradient")
    assert rows[3].endswith("| 0.0600 -> 0.00080 | 0.0624 -> 0.00079 |")
