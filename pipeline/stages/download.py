"""Stage download: the preset's raw dataset into data/raw/, verified, never half-written."""

from __future__ import annotations

from pipeline.core import paths
from pipeline.core.entry import stage_main
from pipeline.core.logs import stage_log as log
from pipeline.core.params_yaml import load_params
from pipeline.data import presets


@stage_main
def main() -> None:
    params = load_params()
    preset = presets.get(params.preset)
    where = preset.obtain(getattr(params, preset.name), paths.RAW, paths.DOWNLOADS)
    log.info(f"download: {params.preset} dataset ready in {where}")


if __name__ == "__main__":
    main()
