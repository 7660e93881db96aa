"""Stage plot: the PNGs a person looks at, from the training histories, metrics/evaluate.json and
metrics/ablation.json."""

from __future__ import annotations

import json

from pipeline import paths
from pipeline.errors import UserError, stage_main
from pipeline.history import read_history
from pipeline.logs import stage_log as log
from pipeline.plotting import (
    plot_ablation,
    plot_comparison,
    plot_confusion,
    plot_curves,
    plot_size,
    read_epochs_csv,
)


def read_input(path) -> str:
    """An input of this stage, or one line saying which stage makes it."""
    if not path.is_file():
        raise UserError(f"{path} is missing; run `dvc repro`, which makes the plot stage's inputs first")
    return path.read_text()


@stage_main
def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = json.loads(read_input(paths.METRICS / "evaluate.json"))
    matrices = json.loads(read_input(paths.CONFUSION / "matrices.json"))
    histories = {arm: read_history(read_input(paths.HISTORY / f"{arm}_seeds.csv")) for arm in paths.HEADLINE_VIEWS}
    ablation = json.loads(read_input(paths.METRICS / "ablation.json"))
    series = read_epochs_csv(read_input(paths.PLOTS / "ablation.csv"))
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
