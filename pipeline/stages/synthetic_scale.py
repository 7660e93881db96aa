"""Stage synthetic_scale (issue 38's opt-in study): the synthetic axis gathered beside Fashion-MNIST's, and the
pre-registered hypotheses H1-H3 tested (:mod:`pipeline.results.synthetic_axis`; docs/synthetic.md wrote them before
the first full run). Writes ``metrics/synthetic.json``, ``plots/synthetic_scale.csv`` and
``plots/synthetic_scale.png``."""

from __future__ import annotations

from pipeline.core import paths
from pipeline.core.entry import stage_main
from pipeline.core.files import read_json, write_json, write_text
from pipeline.core.logs import stage_log as log
from pipeline.core.params_yaml import load_params
from pipeline.data.subsets import point_path
from pipeline.results.synthetic_axis import ARCHES, gather, plot_scale, scale_csv


@stage_main
def main() -> None:
    params = load_params()
    cfg, hunger = params.synthetic, params.data_hunger
    items = [(arch, point) for arch in ARCHES for point in cfg.points]
    pretrained = [read_json(paths.SYNTHETIC_METRICS / f"pretrain_{arch}_{point}.json") for arch, point in items]
    finetuned = [read_json(paths.SYNTHETIC_METRICS / f"finetune_{arch}_{point}.json") for arch, point in items]
    # the small ResNet from scratch at the sizes fine-tuned: H3 reads it at the headline size
    from_scratch = [read_json(point_path("cnn", p)) for p in sorted({hunger.points[0], hunger.headline_point})]
    cnn = {str(summary["n_train_per_class"]): summary for summary in from_scratch}
    metrics = gather(pretrained, finetuned, read_json(paths.METRICS / "pretraining_scale.json"), cnn,
                     cfg.primary_shots)  # fmt: skip
    write_json(paths.METRICS / "synthetic.json", metrics)
    write_text(paths.PLOTS / "synthetic_scale.csv", scale_csv(metrics))
    plot_scale(metrics)
    for name, hypothesis in metrics["hypotheses"].items():
        d = hypothesis["difference"]
        log.info(f"{name} {'MET' if hypothesis['met'] else 'NOT MET'}: {d['mean']:+.3f} [{d['low']:+.3f}, "
                 f"{d['high']:+.3f}] ({hypothesis['rule']})")  # fmt: skip


if __name__ == "__main__":
    main()
