"""Stage sweep: one point of the data-hunger curve, one or more arms at one training-set size, once per seed.

``python -m pipeline.stages.sweep <arm>[,<arm>...] <point>``; dvc.yaml runs it as the matrices
``sweep_scratch``, ``sweep_cnn``, ``sweep_pixels`` and ``sweep_pretrained`` (over ``data_hunger.points``; the
last runs ``linear,finetune``), and ``data_hunger`` gathers them. The arm's code is ``pipeline/arms/<arm>.py``
(see :mod:`pipeline.core.arm_registry`), imported by name so that each item depends on its own arms only. Arms
named together whose modules share one ``point_data`` share its result: the transfer arms load the backbone, extract
the frozen features and fit each seed's probe once, and fine-tuning starts from the very probes the linear arm reports.

The protocol: each seed draws its own subset (:mod:`pipeline.data.subsets`). A trained arm runs the first
``data_hunger.choice_seeds`` seeds at every learning rate of its grid (``data_hunger.<arm>.lrs``; a rate
``prune_z`` standard errors behind on the first seed stops there), keeps the one with the best mean validation
score (accuracy, then loss: ``plateau.better_score``) with its runs, and runs the other seeds at it (the transfer
arms' seed i through backbone i mod k, ``masked_patch.extra_seeds``); every run is scored at step 0
and ``data_hunger.scores`` times over its budget, stops when its plateau cooldown ends (or at the cap) and
keeps its best-validation weights. The probes choose their ridge on validation. The test set is scored once per
run, at the end, and never chooses anything."""

from __future__ import annotations

import sys

from pipeline.arms.protocol import PER_RUN, Choice, Curve, point_summary, seed_protocol
from pipeline.core.arm_registry import ARMS, REGISTRY, TRAINED, arm_module
from pipeline.core.config import Params
from pipeline.core.entry import stage_main
from pipeline.core.errors import UserError
from pipeline.core.files import write_json
from pipeline.core.logs import stage_log as log
from pipeline.core.params_yaml import load_params
from pipeline.data.subsets import point_path
from pipeline.tracking.tracker import stage_tracker
from pipeline.train.runtime import resolve_runtime


def run_point(params: Params, arm: str, point: int, shared: dict | None = None) -> dict:
    """Every seed of one arm at one size; returns the point's summary (written as JSON by ``main``). ``shared``
    holds the point's data by the ``point_data`` function that made it, for the next arm of the same process."""
    runtime = resolve_runtime(params.runtime)
    module = arm_module(arm)  # by name: dvc.yaml lists only this item's arm modules among its deps
    curve = Curve(params.preset, params.model_name, params.backbone_model_name, params.backbone_source,
                  params.data_hunger, params.evaluate.batch_size, runtime, params.backbone_count)  # fmt: skip
    shared = {} if shared is None else shared
    if module.point_data not in shared:
        shared[module.point_data] = module.point_data(curve, point)
    data = shared[module.point_data]
    n = data.n
    lrs = getattr(params.data_hunger, arm).lrs if arm in TRAINED else [None]
    cfg = params.data_hunger
    choice = Choice(cfg.choice_seeds, cfg.prune_z, len(data.val), cfg.choice_keep)
    most = len(lrs) * choice.seeds + len(params.seeds) - choice.seeds  # fewer where the first seed prunes
    done: list[str] = []
    with stage_tracker(params, f"sweep-{arm}-{n}", runtime=runtime, dvc_stage=REGISTRY[arm].dvc_stage, arm=arm,
                       n_train_per_class=str(n), point=str(point)) as stage:  # fmt: skip

        def run(seed: int, lr: float | None) -> tuple[dict, object]:
            name = f"sweep-{arm}-{n}-seed{seed}" + ("" if lr is None else f"-lr{lr:g}")
            differs = {"seed": str(seed)} | ({} if lr is None else {"lr": str(lr)})
            with stage.child(name, differs, **differs) as tracker:
                result = module.run_seed(curve, data, seed, lr)
                for record in result.get("curve", []):
                    tracker.log_record(record, step="step")
                tracker.log_metrics({k: float(result[k]) for k in PER_RUN if k in result})
            done.append(name)
            log.info(f"{name} (run {len(done)} of at most {most}): val_acc {result['val_acc']:.4f}, "
                     f"best step {result.get('best_step', '-')} of {result.get('steps', '-')}")  # fmt: skip
            return result, tracker

        runs, trials = seed_protocol(run, lrs, params.seeds, choice)
        accuracies = [r["test_acc"] for r in runs.values()]
        stage.log_metrics({"test_acc_mean": sum(accuracies) / len(accuracies)}, step=n)
    regs = params.data_hunger.probe_regs
    return point_summary(arm, point, data, runs, trials, lrs, regs) | {"runtime": runtime.describe()}


def parse_args(argv: list[str], points: list[int]) -> tuple[list[str], int]:
    usage = f"usage: python -m pipeline.stages.sweep <arm: {'|'.join(ARMS)}>[,<arm>...] <point: one of {points}>"
    arms = argv[0].split(",") if argv else []
    if (len(argv) != 2 or not all(arm in ARMS for arm in arms) or len(set(arms)) != len(arms)
            or not argv[1].isdigit() or int(argv[1]) not in points):  # fmt: skip
        raise UserError(f"{usage}, got {argv}")
    return arms, int(argv[1])


@stage_main
def main() -> None:
    params = load_params()
    arms, point = parse_args(sys.argv[1:], params.data_hunger.points)
    shared = {}
    for arm in arms:
        summary = run_point(params, arm, point, shared)
        write_json(point_path(arm, point), summary)
        acc = summary["test_acc"]
        log.info(f"sweep {arm} n={summary['n_train_per_class']}/class: test_acc {acc['mean']:.4f} ± {acc['std']:.4f}")


if __name__ == "__main__":
    main()
