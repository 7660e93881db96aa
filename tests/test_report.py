"""The README's results table is generated from metrics/evaluate.json."""

import json
from pathlib import Path

from pipeline.report import results_table

REPO = Path(__file__).resolve().parents[1]


def test_results_table_shows_both_arms_and_baselines_from_the_committed_metrics():
    metrics = json.loads((REPO / "metrics/evaluate.json").read_text())
    table = results_table(metrics)
    scratch = metrics["scratch"]["test_acc"]
    assert f"**{scratch['mean']:.3f} ± {scratch['std']:.3f}**" in table
    assert f"| {metrics['baselines']['pixels_logreg']:.3f} |" in table
    assert table.count("\n| ") == 1 + 2 + 3  # header, two arms, three baselines
