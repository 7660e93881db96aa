"""Stage prepare: decode and resize every image once into uint8 tensor files, plus a manifest.

Offline preset: the target classes' validation images (``validation.offline_per_class`` per class) and
whole test set, their other training images (``train_all``: every arm draws its training subsets from it,
per seed), and the pretraining pool (every image of the other classes). Paper preset: the ImageFolder
train folder split into train and val (``validation.paper_per_class`` per class), and test, once
per input transform (``scratch``: squashed to the model size; ``pretrained``: the weights' resize
and centre crop, normalised with ImageNet statistics).

Every file goes into a temporary folder that replaces ``data/prepared`` whole once all are written,
so an unreadable image found halfway (or a kill) leaves the previous prepared data untouched.
"""

from __future__ import annotations

import csv
import io

from pipeline.core import paths
from pipeline.core.entry import stage_main
from pipeline.core.files import atomic_dir, write_json, write_text
from pipeline.core.logs import stage_log as log
from pipeline.core.params_yaml import load_params
from pipeline.data import presets
from pipeline.models.vit import vit_config


def sizes(model_name: str) -> tuple[int, int]:
    config = vit_config(model_name)
    return config.image_size, config.in_channels


@stage_main
def main() -> None:
    params = load_params()
    with atomic_dir(paths.PREPARED) as out:
        preset = presets.get(params.preset)
        section = getattr(params, preset.name)
        view_sizes = {view: sizes(model) for view, model in preset.view_models(section).items()}
        result = preset.prepare(section, paths.RAW, out, view_sizes, params.val_per_class, params.images.max_pixels)
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(["split", "source", "class", "sha256"])
        writer.writerows(result["manifest"])
        write_text(out / "manifest.csv", buffer.getvalue())
        info = {k: result[k] for k in ("classes", "pool_classes", "counts")}
        write_json(out / "info.json", {"preset": params.preset, **info})
    log.info(f"prepare: {params.preset}, classes {result['classes']}, images per split {result['counts']}")


if __name__ == "__main__":
    main()
