"""Stage sweep: one point of the data-hunger curve, one arm at one training-set size, once per seed.

``python -m pipeline.stages.sweep <arm> <point>``; dvc.yaml runs it as the matrices ``sweep_scratch``,
``sweep_cnn`` (over ``data_hunger.points``) and ``sweep_pretrained`` (arm linear/finetune x point), and ``data_hunger``
gathers them. The arm's code is ``pipeline/arms/<arm>.py`` (see :mod:`pipeline.arms`), imported by name so
that each item depends on its own arm only. Every run takes the same fixed number of optimiser steps of
``data_hunger.batch_size`` images whatever the set size, and the test set is evaluated once, at the end;
sizes and nested subsets are :mod:`pipeline.curve`'s.
"""

from __future__ import annotations

import sys
import time

from pipeline.arms import ARMS, arm_module
from pipeline.arms.common import Curve
from pipeline.config import Params, load_params
from pipeline.curve import point_path
from pipeline.errors import UserError, stage_main
from pipeline.files import write_json
from pipeline.metrics import spread
from pipeline.runtime import resolve_runtime
from pipeline.tracking import stage_tracker

# dvc.yaml's stage of each arm's items: its params list is what an item's MLflow run logs
DVC_STAGES = dict(scratch="sweep_scratch", cnn="sweep_cnn", linear="sweep_pretrained", finetune="sweep_pretrained")


def run_point(params: Params, arm: str, point: int) -> dict:
    """Every seed of one arm at one size; returns the point's summary (written as JSON by ``main``)."""
    runtime = resolve_runtime(params.runtime)
    module = arm_module(arm)  # by name: dvc.yaml lists only this arm's module among the item's deps
    curve = Curve(params.preset, params.model_name, params.backbone_model_name, params.data_hunger,
                  params.evaluate.batch_size, runtime)  # fmt: skip
    data = module.point_data(curve, point)
    n, cfg = data["n"], params.data_hunger
    runs = []  # (last training record, test accuracy, test loss) per seed
    with stage_tracker(params, f"sweep-{arm}-{n}", runtime=runtime, dvc_stage=DVC_STAGES[arm], arm=arm,
                       n_train_per_class=str(n), point=str(point)) as stage:  # fmt: skip
        for seed in params.seeds:
            started = time.perf_counter()
            with stage.child(f"sweep-{arm}-{n}-seed{seed}", {"seed": str(seed)}, seed=str(seed)) as tracker:
                last, accuracy, loss, trained_parameters = module.run_seed(curve, data, seed)
                tracker.log_metrics(
                    {"train_loss": last["train_loss"], "train_acc": last["train_acc"], "test_acc": accuracy,
                     "test_loss": loss, "final_test_acc": accuracy, "final_test_loss": loss}, step=cfg.steps,
                )  # fmt: skip
            runs.append((last, accuracy, loss))
            print(f"sweep {arm} n={n}/class seed {seed}: test_acc {accuracy:.4f}, {cfg.steps} steps in "
                  f"{time.perf_counter() - started:.1f} s")  # fmt: skip
        accuracies = [accuracy for _, accuracy, _ in runs]
        stage.log_metrics({"test_acc_mean": sum(accuracies) / len(accuracies)}, step=n)
    return {
        "arm": arm,
        "point": point,
        "n_train_per_class": n,
        "n_train": len(data["train_labels"]),
        "n_test": len(data["test_labels"]),
        "steps": cfg.steps,
        "batch_size": cfg.batch_size,
        "trained_parameters": trained_parameters,
        "test_acc": spread(accuracies),
        "test_loss": spread([loss for _, _, loss in runs]),
        "train_loss": spread([last["train_loss"] for last, _, _ in runs]),
        "runtime": runtime.describe(),
    }


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
    print(f"sweep {arm} n={summary['n_train_per_class']}/class: test_acc {acc['mean']:.4f} ± {acc['std']:.4f}")


if __name__ == "__main__":
    main()
