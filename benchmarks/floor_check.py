"""Does the plateau rule's floor decide a run? Every cell where a kept run stopped at the floor, trained again
with a lower one.

    python benchmarks/floor_check.py [--window 5] --out metrics/floor_check.json

Run in a project whose ``data/prepared`` and ``models/`` are the full data's. The plateau schedule begins its
cooldown after two windows of ``data_hunger.plateau_window`` scores at the earliest: a run whose cooldown began
there (``stopped_at_floor`` in ``metrics/data_hunger.json``) ended as early as the rule allows, so the floor, not
its validation curve, may have set its length. For every trained arm's size with such a run, this trains the first
seed (the one that chooses the learning rate in the committed run) at every learning rate of the arm's grid twice
on this machine, in one process: with the committed windows and with windows of ``--window`` scores (a floor that
many scores earlier). It reports whether the choice (the sweeps' rule on validation, ``protocol.choose_lr``)
changes, and the chosen run's validation score, steps and test accuracy under each floor. The test set chooses
nothing: it is scored once per floor, for the chosen run only, to say whether the floor moves the reported number.
Both floors run here, so a difference is the floor's, not the machine's.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from pipeline.arms.protocol import Curve, choose_lr
from pipeline.core.arm_registry import TRAINED, arm_module
from pipeline.core.files import read_json, write_text
from pipeline.core.params_yaml import load_params
from pipeline.results.curve_results import stopped_at_floor
from pipeline.train.runtime import resolve_runtime

KEPT = ("val_acc", "val_loss", "best_step", "steps", "decay_step", "stopped_at_cap")


def floor_cells(curve: dict) -> list[tuple[str, str]]:
    """``(arm, n)`` of every trained arm's size in ``data_hunger.json`` with a kept run at the floor."""
    return [(arm, n) for arm in TRAINED for n, run in curve["runs"].get(arm, {}).items()
            if run.get("stopped_at_floor", 0) > 0]  # fmt: skip


def first_seed_choice(module, curve: Curve, data, seed: int, lrs: list[float]) -> dict:
    """The first seed at every ``lr``: each run's validation record, the choice, and the chosen run's test score."""
    runs = {lr: module.run_seed(curve, data, seed, lr) for lr in lrs}
    chosen = choose_lr([(run, lr) for lr, run in runs.items()])[1]
    window = curve.config.plateau_window
    return {
        "window": window,
        "lr": chosen,
        "trials": {f"{lr:g}": {k: run[k] for k in KEPT if k in run} | {"at_floor": stopped_at_floor(run, window)}
                   for lr, run in runs.items()},
        "test_acc": runs[chosen]["score"]()["test_acc"],
    }  # fmt: skip


def check_cell(params, runtime, arm: str, n: str, window: int) -> dict:
    """One cell under the committed floor and the lower one; whether the choice holds, and the score's change."""
    curve = Curve(params.preset, params.model_name, params.backbone_model_name, params.backbone_source,
                  params.data_hunger, params.evaluate.batch_size, runtime, params.backbone_count)  # fmt: skip
    point = params.data_hunger.offline_sizes.index(int(n))
    module = arm_module(arm)
    data = module.point_data(curve, point)  # shared: the floor changes training, not the data
    lrs = getattr(params.data_hunger, arm).lrs
    lower = dataclasses.replace(curve, config=dataclasses.replace(curve.config, plateau_window=window))
    committed = first_seed_choice(module, curve, data, params.seeds[0], lrs)
    lowered = first_seed_choice(module, lower, data, params.seeds[0], lrs)
    return {
        "arm": arm, "n_train_per_class": int(n), "point": point, "committed": committed, "lower": lowered,
        "choice_holds": committed["lr"] == lowered["lr"],
        "test_change": lowered["test_acc"] - committed["test_acc"],
    }  # fmt: skip


def summary(cells: list[dict]) -> dict:
    """Over every cell's first-seed runs: choices that hold, runs whose validation accuracy the lower floor lowers,
    raises or leaves, and runs at each floor."""
    pairs = [(run, cell["lower"]["trials"][lr]) for cell in cells for lr, run in cell["committed"]["trials"].items()]
    return {
        "choice_holds": sum(cell["choice_holds"] for cell in cells), "of": len(cells), "runs": len(pairs),
        "val_acc_lower": sum(low["val_acc"] < run["val_acc"] for run, low in pairs),
        "val_acc_higher": sum(low["val_acc"] > run["val_acc"] for run, low in pairs),
        "at_floor": {"committed": sum(run["at_floor"] for run, _ in pairs),
                     "lower": sum(low["at_floor"] for _, low in pairs)},
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=int, default=5, help="the lower floor's windows, in scores (default 5)")
    parser.add_argument("--out", type=Path, help="rewritten after every cell (default: printed at the end)")
    args = parser.parse_args()
    params = load_params()
    runtime = resolve_runtime(params.runtime)
    cells = floor_cells(read_json(Path("metrics/data_hunger.json")))
    results = []

    def document() -> str:
        return json.dumps({
            "runtime": runtime.describe(), "seed": params.seeds[0],
            "windows": {"committed": params.data_hunger.plateau_window, "lower": args.window},
            "cells": results, **summary(results),
        }, indent=1) + "\n"  # fmt: skip

    for arm, n in cells:
        results.append(check_cell(params, runtime, arm, n, args.window))
        if args.out:
            write_text(args.out, document())
    if not args.out:
        print(document(), end="")


if __name__ == "__main__":
    main()
