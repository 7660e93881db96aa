"""Stage plot: the PNGs a person looks at, from the training histories, metrics/evaluate.json and
metrics/ablation.json."""

from __future__ import annotations

from pipeline.core import paths
from pipeline.core.entry import stage_main
from pipeline.core.files import read_csv_text, read_json
from pipeline.core.logs import stage_log as log
from pipeline.results.figures import (
    plot_ablation,
    plot_comparison,
    plot_confusion,
    plot_curves,
    plot_size,
    pyplot,
    read_epochs_csv,
)
from pipeline.results.history import read_history


@stage_main
def main() -> None:
    plt = pyplot()
    metrics = read_json(paths.METRICS / "evaluate.json")
    matrices = read_json(paths.CONFUSION / "matrices.json")
    histories = {arm: read_history(read_csv_text(paths.HISTORY / f"{arm}_seeds.csv")) for arm in paths.HEADLINE_VIEWS}
    ablation = read_json(paths.METRICS / "ablation.json")
    series = read_epochs_csv(read_csv_text(paths.PLOTS / "ablation.csv"))
    plot_curves(plt, histories, metrics["baselines"])
    plot_confusion(plt, matrices)
    plot_comparison(plt, metrics)
    plot_size(plt, metrics)
    plot_ablation(plt, ablation, series)
    log.info(
        f"plot: wrote curves.png, confusion.png, comparison.png, size_vs_accuracy.png, ablation.png to {paths.PLOTS}/"
    )


if __name__ == "__main__":
    main()
