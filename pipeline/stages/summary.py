"""Stage summary: the headline numbers of every stage into metrics/summary.json, the DVC metrics file.

``dvc metrics show`` / ``dvc metrics diff`` / ``dvc exp show`` read this file alone; the detailed files it
draws on (``metrics/evaluate.json``, ``data_hunger.json``, ``comparisons.json``, ``ablation.json``,
``pretraining_scale.json``, ``backbone.json``) are plain outputs of their stages.
"""

from __future__ import annotations

from pipeline.core import paths
from pipeline.core.arm_registry import ARMS
from pipeline.core.entry import stage_main
from pipeline.core.files import read_json, write_json
from pipeline.core.logs import stage_log as log
from pipeline.core.params_yaml import load_params
from pipeline.results.headline import count_numbers, headline


@stage_main
def main() -> None:
    names = ("evaluate", "data_hunger", "comparisons", "ablation", "pretraining_scale", "backbone")
    files = {name: read_json(paths.METRICS / f"{name}.json") for name in names}
    shots = load_params().masked_patch.stretch_shots  # the pre-registered stretch's size, one of the axis's shots
    summary = headline(*files.values(), arms=ARMS, shots=shots)
    write_json(paths.METRICS / "summary.json", summary)
    log.info(f"summary: {count_numbers(summary)} numbers in {paths.METRICS / 'summary.json'}")


if __name__ == "__main__":
    main()
