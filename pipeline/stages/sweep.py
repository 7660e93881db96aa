"""Stage sweep: one point of the data-hunger curve, one arm at one training-set size, once per seed.

``python -m pipeline.stages.sweep <arm> <point>``; dvc.yaml runs it as the matrices ``sweep_scratch``,
``sweep_cnn``, ``sweep_pixels`` (over ``data_hunger.points``) and ``sweep_pretrained`` (arm linear/finetune x
point), and ``data_hunger`` gathers them. The arm's code is ``pipeline/arms/<arm>.py`` (see
:mod:`pipeline.arms`), imported by name so that each item depends on its own arm only.

The protocol: each seed draws its own subset (:mod:`pipeline.curve`). A trained arm runs the first seed at
every learning rate of its grid (``data_hunger.<arm>.lrs``), keeps the one with the best validation score
(accuracy, then loss: ``engine.better_score``), and runs the other seeds at it; every run is scored at step 0
and ``data_hunger.scores`` times over its budget, stops when the score stops improving (or at the cap) and
keeps its best-validation weights. The probes choose their ridge on validation. The test set is scored once per
run, at the end, and never chooses anything."""

from __future__ import annotations

import sys

from pipeline.arms import ARMS, REGISTRY, TRAINED, arm_module
from pipeline.arms.common import PER_RUN, Curve, point_summary, seed_protocol
from pipeline.config import Params, load_params
from pipeline.curve import point_path
from pipeline.errors import UserError, stage_main
from pipeline.files import write_json
from pipeline.logs import stage_log as log
from pipeline.runtime import resolve_runtime
from pipeline.tracking import stage_tracker


def run_point(params: Params, arm: str, point: int) -> dict:
    """Every seed of one arm at one size; returns the point's summary (written as JSON by ``main``)."""
    runtime = resolve_runtime(params.runtime)
    module = arm_module(arm)  # by name: dvc.yaml lists only this arm's module among the item's deps
    curve = Curve(params.preset, params.model_name, params.backbone_model_name, params.backbone_source,
                  params.data_hunger, params.evaluate.batch_size, runtime)  # fmt: skip
    data = module.point_data(curve, point)
    n = data["n"]
    lrs = getattr(params.data_hunger, arm).lrs if arm in TRAINED else [None]
    first, *others = params.seeds
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
            done = lrs.index(lr) + 1 if seed == first else len(lrs) + others.index(seed) + 1
            log.info(f"{name} (run {done} of {len(lrs) + len(others)}): val_acc {result['val_acc']:.4f}, "
                     f"best step {result.get('best_step', '-')} of {result.get('steps', '-')}")  # fmt: skip
            return result, tracker

        runs, trials = seed_protocol(run, lrs, params.seeds)
        accuracies = [r["test_acc"] for r in runs.values()]
        stage.log_metrics({"test_acc_mean": sum(accuracies) / len(accuracies)}, step=n)
    regs = params.data_hunger.probe_regs
    return point_summary(arm, point, data, runs, trials, lrs, regs) | {"runtime": runtime.describe()}


def parse_args(argv: list[str], points: list[int]) -> tuple[str, int]:
    usage = f"usage: python -m pipeline.stages.sweep <arm: {'|'.join(ARMS)}> <point: one of {points}>"
    if len(argv) != 2 or argv[0] not in ARMS or not argv[1].isdigit() or int(argv[1]) not in points:
        raise UserError(f"{usage}, got {argv}")
    return argv[0], int(argv[1])


@stage_main
def main() -> None:
    params = load_params()
    arm, point = parse_args(sys.argv[1:], params.data_hunger.points)
    summary = run_point(params, arm, point)
    write_json(point_path(arm, point), summary)
    acc = summary["test_acc"]
    log.info(f"sweep {arm} n={summary['n_train_per_class']}/class: test_acc {acc['mean']:.4f} ± {acc['std']:.4f}")


if __name__ == "__main__":
    main()
