"""Stage synthetic_pretrain (issue 38's opt-in study): one backbone of the synthetic axis.

``python -m pipeline.stages.synthetic_pretrain <arch: vit|resnet> <point>``; ``studies/synthetic/dvc.yaml`` runs
it as the matrix arch x ``synthetic.points``. The backbone is trained on ``synthetic.per_category[point]``
instances of every category by ``backbone``'s recipe for ``synthetic.steps`` steps, the best of
``synthetic.scores`` held-out scores kept (:mod:`pipeline.pretrain.synthetic_backbones`); it is saved to
``models/synthetic/<arch>_<point>.pt`` and scored by the pretraining axis's few-shot probe on the target classes
(``metrics/synthetic/pretrain_<arch>_<point>.json``). A backbone under ``synthetic.min_held_out_acc`` is marked
unused there, as docs/synthetic.md wrote before the first run."""

from __future__ import annotations

import sys

from pipeline.core import paths
from pipeline.core.entry import stage_main
from pipeline.core.files import write_json
from pipeline.core.logs import stage_log as log
from pipeline.core.params_yaml import load_params
from pipeline.data.images import load_split
from pipeline.data.subsets import SHOTS_KEY, require_per_class, sweep_train_set, val_set
from pipeline.data.synthetic_images import load_size, require_offline
from pipeline.pretrain.size_axis import few_shot
from pipeline.pretrain.synthetic_backbones import arch_and_point, model_path, pretrain_synthetic, state_of
from pipeline.pretrain.trunks import Trunk, features
from pipeline.tracking.tracker import stage_tracker
from pipeline.train.checkpoints import save_state
from pipeline.train.loop import count_parameters
from pipeline.train.runtime import resolve_runtime


@stage_main
def main() -> None:
    params = load_params()
    cfg, runtime, batch = params.synthetic, resolve_runtime(params.runtime), params.evaluate.batch_size
    arch, point = arch_and_point(sys.argv[1:], cfg.points, "synthetic_pretrain")
    require_offline(params.preset)
    target, shots = sweep_train_set("offline", "pretrained"), params.pretraining_scale.shots
    require_per_class(target, max(shots), SHOTS_KEY)  # before training, not after
    sets = load_size(cfg.per_category[point], cfg.per_category[-1], cfg.held_out_per_category)
    name = f"synthetic-{arch}-{len(sets[0])}"
    with stage_tracker(params, name, seed=params.backbone.seed, runtime=runtime, arch=arch,
                       n_pretrain=str(len(sets[0]))) as tracker:  # fmt: skip
        model, history, best = pretrain_synthetic(
            arch, params.offline.model, tuple(params.data_hunger.cnn_widths), sets, params.backbone, cfg.steps,
            cfg.scores, runtime, batch, lambda record: tracker.log_record(record, step="step"),
        )  # fmt: skip
        trunk = Trunk(model)
        result = few_shot(lambda image_set: features(trunk, image_set, runtime, batch), target, val_set("pretrained"),
                          load_split(paths.prepared_split("pretrained", "test")), shots, params.seeds,
                          params.data_hunger.probe_regs)  # fmt: skip
        used = best["held_out_acc"] >= cfg.min_held_out_acc
        tracker.log_metrics({"best_held_out_acc": best["held_out_acc"], "used": float(used)}
                            | {f"few_shot_{n}": r["mean"] for n, r in result.items()})  # fmt: skip
    save_state(model_path(arch, point), state_of(model))
    write_json(paths.SYNTHETIC_METRICS / f"pretrain_{arch}_{point}.json", {
        "arch": arch, "point": point, "n_pretrain": len(sets[0]), "categories": cfg.categories, "seeds": params.seeds,
        "steps": cfg.steps, "held_out_acc": best["held_out_acc"], "best_step": best["step"], "used": used,
        "held_out": [{k: r[k] for k in ("step", "train_loss", "train_acc", "held_out_acc")} for r in history],
        "trained_parameters": count_parameters(model), "few_shot": result, "runtime": runtime.describe(),
    })  # fmt: skip
    log.info(f"synthetic_pretrain {arch} on {len(sets[0]):,}: held-out {best['held_out_acc']:.3f} at step "
             f"{best['step']}{'' if used else ' (under the floor: not used)'}; few-shot "
             + ", ".join(f"{n}/class {r['mean']:.3f}" for n, r in result.items()))  # fmt: skip


if __name__ == "__main__":
    main()
