"""Stage synthetic_finetune (issue 38's opt-in study): one synthetic backbone on the curve.

``python -m pipeline.stages.synthetic_finetune <arch: vit|resnet> <point>``; ``studies/synthetic/dvc.yaml`` runs it
as the matrix arch x ``synthetic.points``. The backbone ``synthetic_pretrain`` saved for that size is probed and
fine-tuned (:mod:`pipeline.arms.synthetic_transfer`) at the curve's first size and at
``data_hunger.headline_point`` (10 and 75 per class) by the curve's protocol: its seeds and subsets, the
``finetune`` grid chosen on validation over ``data_hunger.choice_seeds`` seeds, the validation rule.
``metrics/synthetic/finetune_<arch>_<point>.json`` holds each arm's point summary by images per class, as the
curve's point files do."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable

from pipeline.arms.protocol import PER_RUN, Choice, Curve, point_summary, seed_protocol
from pipeline.arms.synthetic_transfer import ARMS, point_data, run_seed
from pipeline.core import paths
from pipeline.core.entry import stage_main
from pipeline.core.files import write_json
from pipeline.core.logs import stage_log as log
from pipeline.core.params_yaml import load_params
from pipeline.data.synthetic_images import require_offline
from pipeline.pretrain.synthetic_backbones import arch_and_point, load_synthetic
from pipeline.tracking.tracker import stage_tracker
from pipeline.train.runtime import resolve_runtime


def tracked(stage, arm: str, curve: Curve, data) -> Callable:
    """``run(seed, lr)`` for :func:`seed_protocol`: one seed of ``arm``, a child run of ``stage`` in MLflow."""

    def run(seed: int, lr: float | None) -> tuple[dict, object]:
        differs = {"seed": str(seed)} | ({} if lr is None else {"lr": str(lr)})
        name = f"{stage.run_name}-seed{seed}" + ("" if lr is None else f"-lr{lr:g}")
        with stage.child(name, differs, **differs) as tracker:
            outcome = run_seed(arm, curve, data, seed, lr)
            for record in outcome.get("curve", []):
                tracker.log_record(record, step="step")
            tracker.log_metrics({k: float(outcome[k]) for k in PER_RUN if k in outcome})
        return outcome, tracker

    return run


@stage_main
def main() -> None:
    params = load_params()
    cfg, runtime, hunger = params.synthetic, resolve_runtime(params.runtime), params.data_hunger
    arch, point = arch_and_point(sys.argv[1:], cfg.points, "synthetic_finetune")
    require_offline(params.preset)
    backbone = load_synthetic(arch, point, params.offline.model, tuple(hunger.cnn_widths), cfg.categories, runtime)
    curve = Curve(params.preset, params.model_name, params.backbone_model_name, params.backbone_source, hunger,
                  params.evaluate.batch_size, runtime)  # fmt: skip
    n_pretrain = cfg.categories * cfg.per_category[point]
    result: dict = {"arch": arch, "point": point, "n_pretrain": n_pretrain, "seeds": params.seeds,
                    "runtime": runtime.describe()}  # fmt: skip
    choice = Choice(hunger.choice_seeds, hunger.prune_z, keep=hunger.choice_keep)
    for curve_point in sorted({hunger.points[0], hunger.headline_point}):
        data = point_data(curve, curve_point, backbone)
        for arm in ARMS:
            lrs = hunger.finetune.lrs if arm == "finetune" else [None]
            name = f"synthetic-{arch}-{n_pretrain}-{arm}-{data.n}"
            with stage_tracker(params, name, runtime=runtime, arch=arch, arm=arm, n_pretrain=str(n_pretrain),
                               n_train_per_class=str(data.n)) as stage:  # fmt: skip
                runs, trials = seed_protocol(tracked(stage, arm, curve, data), lrs, params.seeds,
                                             dataclasses.replace(choice, n_val=len(data.val)))  # fmt: skip
            summary = point_summary(arm, curve_point, data, runs, trials, lrs, hunger.probe_regs)
            result.setdefault(arm, {})[str(data.n)] = summary
            log.info(f"synthetic_finetune {arch} on {n_pretrain:,}, {arm} at {data.n}/class: test_acc "
                     f"{summary['test_acc']['mean']:.4f} ± {summary['test_acc']['std']:.4f}")  # fmt: skip
    write_json(paths.SYNTHETIC_METRICS / f"finetune_{arch}_{point}.json", result)


if __name__ == "__main__":
    main()
