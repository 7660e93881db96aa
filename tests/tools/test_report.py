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
    assert table.count("\n| ") == 1 + 2 + 3  # header, two arms, three baselines


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
    assert rows[0] == "| per class | ViT from scratch | small ResNet from scratch | pixels logreg |"
    assert rows[2] == "| 10 | 0.400 ± 0.010 | **0.500 ± 0.010** | 0.550 |"
    assert rows[3] == "| 100 | **0.700 ± 0.010** | 0.600 ± 0.010 | (not fit) |"


def test_ablation_table_keeps_the_variant_order_and_names_each_part():
    def spread(mean):
        return {"mean": mean, "std": 0.0, "per_seed": [mean, mean]}

    result = {"test_acc": spread(0.5), "collapse": spread(0.4), "train_loss": spread(0.9)}
    ablation = {
        "order": ["seed", "paper+aug+mean"],
        "variants": {"paper+aug+mean": result, "seed": result},
        "baselines": {"chance": 1 / 3},
    }
    table = ablation_table(ablation, {"linear": {"test_acc": spread(0.6)}})
    rows = table.splitlines()
    assert rows[2].startswith("| `seed` | seed 000's optimiser") and "**0.500 ± 0.000**" in rows[2]
    assert rows[3].startswith("| `paper+aug+mean` | paper's optimiser") and "crop/flip + mean pooling" in rows[3]
    assert "0.600 ± 0.000" in rows[4] and rows[5] == "| (baseline) | chance | 0.333 | | | |"
