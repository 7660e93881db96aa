"""Stage pretrain_scale: one backbone of the pretraining-size axis (paper Figures 3 and 4, in miniature).

``python -m pipeline.stages.pretrain_scale <arch: vit|resnet> <point>``; dvc.yaml runs it as the matrix
``pretrain_scale`` (arch x ``pretraining_scale.points``) and ``pretraining_scale`` gathers the items. The
backbone is pretrained on ``pretraining_scale.pool_per_class[point]`` images of each pool class (nested
across sizes) with ``backbone``'s recipe, then scored by its pool test accuracy and by the few-shot probe on
the target classes at ``pretraining_scale.shots`` images per class (each seed its own shots; the ridge chosen
on the validation split). At the pool's full size the ViT is the backbone stage's model (the same recipe,
seed and images in the same order), so it is read, not trained again. Offline preset only.
"""

from __future__ import annotations

import sys

from pipeline.core import paths
from pipeline.core.config import Params
from pipeline.core.entry import stage_main
from pipeline.core.errors import UserError
from pipeline.core.files import read_json, write_json
from pipeline.core.logs import stage_log as log
from pipeline.core.params_yaml import load_params
from pipeline.data import presets
from pipeline.data.images import load_split
from pipeline.data.subsets import POOL_KEY, SHOTS_KEY, require_per_class, seed_subset, sweep_train_set, val_set
from pipeline.pretrain.size_axis import ARCHES, few_shot
from pipeline.pretrain.supervised import pretrain_on_pool
from pipeline.pretrain.trunks import Trunk, features
from pipeline.tracking.tracker import stage_tracker
from pipeline.train.checkpoints import load_backbone
from pipeline.train.loop import count_parameters
from pipeline.train.runtime import resolve_runtime

OUTPUT = paths.METRICS / "pretraining_scale"
NOT_OFFLINE = "the paper preset's backbone is ImageNet's; the pretraining-size axis needs the offline pool"


def run_item(params: Params, arch: str, point: int) -> dict:
    runtime, cfg, batch = resolve_runtime(params.runtime), params.backbone, params.evaluate.batch_size
    pool_all = load_split(paths.PREPARED / "pool_train.pt")
    pool_test = load_split(paths.PREPARED / "pool_test.pt")
    target = sweep_train_set("offline", "pretrained")
    require_per_class(target, max(params.pretraining_scale.shots), SHOTS_KEY)  # before training, not after
    pool = seed_subset(pool_all, params.pretraining_scale.pool_per_class[point], cfg.seed, POOL_KEY)
    name = f"pretrain_scale-{arch}-{len(pool)}"
    with stage_tracker(params, name, seed=cfg.seed, runtime=runtime, arch=arch, n_pretrain=str(len(pool))) as tracker:
        if arch == "vit" and len(pool) == len(pool_all):  # the backbone stage's pretrain_on_pool, read
            model = load_backbone(params.offline.model, runtime, "supervised")
            pool_test_acc = read_json(paths.METRICS / "backbone.json")["pool_test_acc"]
        else:
            widths = tuple(params.data_hunger.cnn_widths)
            model, history = pretrain_on_pool(
                arch, params.offline.model, widths, (pool, pool_test), cfg, runtime, batch, tracker, name, False
            )
            pool_test_acc = history[-1]["test_acc"]
        trunk = Trunk(model.eval())
        result = few_shot(
            lambda image_set: features(trunk, image_set, runtime, batch), target,
            val_set("pretrained"), load_split(paths.prepared_split("pretrained", "test")),
            params.pretraining_scale.shots, params.seeds, params.data_hunger.probe_regs,
        )  # fmt: skip
        tracker.log_metrics({"pool_test_acc": pool_test_acc} | {f"few_shot_{n}": r["mean"] for n, r in result.items()})
    return {"arch": arch, "point": point, "n_pretrain": len(pool), "pool_test_acc": pool_test_acc,
            "trained_parameters": count_parameters(model), "epochs": cfg.epochs, "few_shot": result,
            "runtime": runtime.describe()}  # fmt: skip


@stage_main
def main() -> None:
    params = load_params()
    points = params.pretraining_scale.points
    argv = sys.argv[1:]
    if len(argv) != 2 or argv[0] not in ARCHES or not argv[1].isdigit() or int(argv[1]) not in points:
        raise UserError(f"usage: python -m pipeline.stages.pretrain_scale <arch: {'|'.join(ARCHES)}> <point: one of "
                        f"{points}>, got {argv}")  # fmt: skip
    arch, point = argv[0], int(argv[1])
    if not presets.get(params.preset).has_pool:
        write_json(OUTPUT / f"{arch}_{point}.json", {"preset": params.preset, "skipped": NOT_OFFLINE})
        return
    summary = run_item(params, arch, point)
    write_json(OUTPUT / f"{arch}_{point}.json", summary)
    row = ", ".join(f"{n}/class {r['mean']:.3f}" for n, r in summary["few_shot"].items())
    log.info(f"pretrain_scale {arch} on {summary['n_pretrain']} images: pool test {summary['pool_test_acc']:.3f}; "
             f"few-shot {row}")  # fmt: skip


if __name__ == "__main__":
    main()
