"""Stage synthetic_data (issue 38's opt-in study, ``studies/synthetic/dvc.yaml``): every instance of the
synthetic categories rendered once (:mod:`pipeline.data.synthetic_images`): ``synthetic.categories`` systems from
``synthetic.seed``, the largest size's instances of each and the held-out ones after them. Also writes the
images' pixel statistics beside Fashion-MNIST's (``metrics/synthetic/images.json``) and a grid of example
categories (``plots/synthetic_examples.png``). docs/synthetic.md has the design, written before the first run."""

from __future__ import annotations

from pipeline.core import paths
from pipeline.core.entry import stage_main
from pipeline.core.files import write_json
from pipeline.core.logs import stage_log as log
from pipeline.core.params_yaml import load_params
from pipeline.data.images import load_split
from pipeline.data.synthetic_images import SyntheticSet, examples, generate, require_offline
from pipeline.results.synthetic_axis import pixel_statistics, plot_examples


@stage_main
def main() -> None:
    params = load_params()
    cfg = params.synthetic
    require_offline(params.preset)
    info = generate(SyntheticSet(cfg.seed, cfg.categories, cfg.per_category[-1] + cfg.held_out_per_category))
    pool = load_split(paths.PREPARED / "pool_train.pt")  # Fashion-MNIST's seven pool classes, for comparison
    fashion = pixel_statistics(pool.images) | {"images": len(pool), "what": "the pool's training images"}
    write_json(paths.SYNTHETIC_METRICS / "images.json", {"synthetic": info, "fashion_mnist": fashion})
    plot_examples(examples(rows=8, columns=10))
    log.info(f"synthetic_data: {info['images']:,} images of {info['categories']} categories in {info['seconds']} s "
             f"({info['images_per_s']:,}/s); pixel mean {info['mean']:.3f} (Fashion-MNIST {fashion['mean']:.3f}), "
             f"filling rate {info['fill']['mean']:.2f} (Fashion-MNIST {fashion['fill']['mean']:.2f})")  # fmt: skip


if __name__ == "__main__":
    main()
