"""Does the plateau rule's floor decide a run? Every cell where a kept run stopped at the floor, trained again
with a lower one.

    python benchmarks/floor_check.py [--window 5] --out metrics/floor_check.json

Run in a project whose ``data/prepared`` and ``models/`` are the full data's. The plateau schedule begins its
cooldown after two windows of ``data_hunger.plateau_window`` scores at the earliest: a run whose cooldown began
there (``stopped_at_floor`` in ``metrics/data_hunger.json``) ended as early as the rule allows, so the floor, not
its validation curve, may have set its length. For every trained arm's size with such a run, this trains the first
seed (the one that chose the learning rate in the run before issue 37's rerun) at every learning rate of the arm's
grid twice on this machine, in one process: with the committed windows and with windows of ``--window`` scores (a
floor that many scores earlier). It reports whether the choice (the sweeps' rule on validation,
``protocol.choose_lr``) changes, and the chosen run's validation score, steps and test accuracy under each floor.
The test set chooses nothing: it is scored once per floor, for the chosen run only, to say whether the floor moves
the reported number. Both floors run here, so a difference is the floor's, not the machine's.

    python benchmarks/floor_check.py --trend accuracy --reference DIR [DIR ...] --out metrics/floor_rule.json

tests a candidate rule instead, written down with its adoption rule before this ran (docs/results.md, "Runs that
end at the floor"): the plateau's windows compare the validation accuracy, not the loss
(``data_hunger.plateau_score: accuracy``). For every floor cell of the arms named, the choice seeds train at every
learning rate of the grid under the candidate, chosen as the sweeps choose (``protocol.choose_on_validation``,
pruning included); the test set is never scored. Each cell's committed rule is the first DIR's point file that ran
on this CPU kind in this precision (the committed run's own, ``metrics/data_hunger``, or the cross-kind rerun's,
``metrics/run_before_accuracy_rule/rerun_cpu/progress/metrics/data_hunger`` for the loss rule's), so both
rules' numbers come from one CPU kind and precision; a cell with none is left unchecked. Per cell it reports the
chosen rate, its mean validation accuracy and its runs at the floor under each rule, and whether the candidate
passes: none of its chosen runs at the floor, and its chosen mean validation accuracy no more than one standard
error of a difference of two accuracies below the committed rule's.

    python benchmarks/floor_check.py --at-floor [--window 5] --out metrics/floor_runs.json

asks it of the committed run itself (issue 37: "neither end of a run binds", or one run per affected cell that
shows a lower floor changes neither its choice nor its score): every kept run that began its cooldown at the floor
is trained again at its chosen rate, with the committed windows (``exact``: its point file's validation score,
bit for bit, on the CPU kind and precision it ran on) and with windows of ``--window`` scores, and reports both
runs' validation and test accuracy, steps and floor. A run on a choice seed is flagged (``choice_seed``): a lower
floor might move the choice there, and only the grid on every choice seed can say whether it does.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path

from replication import run_kind

from pipeline.arms.protocol import Choice, Curve, accuracy_se, choose_lr, choose_on_validation
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


def committed_curve(params, runtime, config) -> Curve:
    """The sweeps' curve of ``params`` on ``runtime`` with the data_hunger section ``config`` (a rule varied)."""
    return Curve(params.preset, params.model_name, params.backbone_model_name, params.backbone_source,
                 config, params.evaluate.batch_size, runtime, params.backbone_count)  # fmt: skip


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
    curve = committed_curve(params, runtime, params.data_hunger)
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


def floor_runs_cell(params, runtime, arm: str, n: str, window: int, points: Path) -> dict:
    """``--at-floor``: the cell's kept runs at the floor (``floor_runs``), from its committed point file."""
    curve = committed_curve(params, runtime, params.data_hunger)
    point = params.data_hunger.offline_sizes.index(int(n))
    committed = read_json(points / f"{arm}_{point}.json")
    module = arm_module(arm)
    lower = dataclasses.replace(curve, config=dataclasses.replace(curve.config, plateau_window=window))
    runs = floor_runs(module, (curve, lower), module.point_data(curve, point), committed,
                      params.seeds[: params.data_hunger.choice_seeds])  # fmt: skip
    return {"arm": arm, "n_train_per_class": int(n), "point": point, "lr": committed["lr"], "runs": runs}


def floor_runs(module, curves: tuple[Curve, Curve], data, committed: dict, choice_seeds: list[int]) -> list[dict]:
    """Each kept run of ``committed`` (a point file) that began its cooldown at the floor, trained again at its
    chosen rate under the committed windows (``curves[0]``: it must give its point file's validation score,
    ``exact``) and under lower ones (``curves[1]``). A run on a choice seed is flagged: a lower floor could move
    the choice there, which one run cannot show. The test set is scored once per floor for each run, to say
    whether the floor moves the reported number; it chooses nothing."""
    windows = [curve.config.plateau_window for curve in curves]

    def record(result: dict, window: int) -> dict:
        test = result.pop("score")()["test_acc"]
        return {k: result[k] for k in KEPT if k in result} | {"at_floor": stopped_at_floor(result, window),
                                                              "test_acc": test}  # fmt: skip

    runs = []
    for seed, kept in committed["runs"].items():
        if not stopped_at_floor(kept, windows[0]):
            continue
        again, lowered = (record(module.run_seed(curve, data, int(seed), committed["lr"]), window)
                          for curve, window in zip(curves, windows, strict=True))  # fmt: skip
        runs.append({
            "seed": int(seed), "choice_seed": int(seed) in choice_seeds,
            "committed": {k: kept[k] for k in ("val_acc", "val_loss", "steps", "test_acc")},
            "exact": (again["val_acc"], again["val_loss"]) == (kept["val_acc"], kept["val_loss"]),
            "again": again, "lower": lowered,
            "val_change": lowered["val_acc"] - again["val_acc"], "test_change": lowered["test_acc"] - again["test_acc"],
        })  # fmt: skip
    return runs


def candidate_choice(module, curve: Curve, data, seeds: list[int], lrs: list[float]) -> dict:
    """The choice seeds at every learning rate under ``curve``'s rule, chosen as the sweeps choose; validation
    only. Each run's record, the chosen rate, its mean validation score and its runs at the floor."""
    cfg = curve.config
    window = cfg.plateau_window

    def run(seed: int, lr: float) -> tuple[dict, None]:
        result = module.run_seed(curve, data, seed, lr)
        result.pop("score")  # the test set: never scored here
        return result, None

    choice = Choice(cfg.choice_seeds, cfg.prune_z, len(data.val))
    trained, means, dropped, chosen = choose_on_validation(run, lrs, seeds[: cfg.choice_seeds], choice)

    def record(result: dict) -> dict:
        return {k: result[k] for k in KEPT if k in result} | {"at_floor": stopped_at_floor(result, window)}

    trials = {f"{lr:g}": means[lr] | {"pruned": lr in dropped,
                                      "seeds": {str(seed): record(result) for seed, (result, _) in
                                                zip(seeds, trained[lr], strict=False)}}
              for lr in lrs}  # fmt: skip
    return {"trend": cfg.plateau_score, "lr": chosen, "val_acc": means[chosen]["val_acc"], "trials": trials,
            "at_floor": sum(r["at_floor"] for r in trials[f"{chosen:g}"]["seeds"].values()),
            "steps": [r["steps"] for r in trials[f"{chosen:g}"]["seeds"].values()]}  # fmt: skip


def reference_choice(point: dict, window: int, choice_seeds: list[int]) -> dict:
    """The committed rule's choice in a point file: its rate, mean validation accuracy over the choice seeds, and
    the choice seeds' kept runs at the floor and their steps."""
    kept = [point["runs"][str(seed)] for seed in choice_seeds]
    return {"trend": "loss", "lr": point["lr"], "val_acc": point["lr_trials"][f"{point['lr']:g}"]["val_acc"],
            "at_floor": sum(stopped_at_floor(run, window) for run in kept), "steps": [run["steps"] for run in kept],
            "runtime": point["runtime"]}  # fmt: skip


def same_kind_reference(references: list[Path], name: str, runtime: str) -> Path | None:
    """The first of ``references`` whose point file ``name`` ran on this CPU kind in this precision (``runtime``,
    ``Runtime.describe()``), so that the two rules differ in the rule alone; None where none did."""
    for folder in references:
        path = folder / name
        if path.is_file() and run_kind(read_json(path)["runtime"]) == run_kind(runtime):
            return path
    return None


def rule_cell(params, runtime, arm: str, n: str, reference: Path) -> dict:
    """One floor cell under the candidate trend (``data_hunger.plateau_score: accuracy``) against the committed
    rule's point file ``reference``; whether the candidate passes there."""
    config = dataclasses.replace(params.data_hunger, plateau_score="accuracy")
    curve = committed_curve(params, runtime, config)
    point = params.data_hunger.offline_sizes.index(int(n))
    module = arm_module(arm)
    data = module.point_data(curve, point)
    candidate = candidate_choice(module, curve, data, params.seeds, getattr(config, arm).lrs)
    committed = reference_choice(read_json(reference), config.plateau_window,
                                 params.seeds[: config.choice_seeds])  # fmt: skip
    allowance = math.sqrt(2) * accuracy_se(committed["val_acc"], len(data.val))
    floor_free, no_worse = candidate["at_floor"] == 0, candidate["val_acc"] >= committed["val_acc"] - allowance
    return {
        "arm": arm, "n_train_per_class": int(n), "point": point, "reference": str(reference),
        "committed": committed, "candidate": candidate, "allowance": allowance,
        "floor_free": floor_free, "no_worse": no_worse, "passes": floor_free and no_worse,
    }  # fmt: skip


def rule_document(runtime, cells: list[dict], unchecked: list[tuple[str, str, str]], pending: int = 0) -> dict:
    """The candidate rule's check: every cell, those left unchecked and why, and whether the candidate may be
    adopted (every floor cell checked and passed) or the check is incomplete (``pending``: cells still to run)."""
    passed = all(cell["passes"] for cell in cells)
    return {
        "runtime": runtime.describe(), "cells": cells,
        "unchecked": [{"arm": arm, "n_train_per_class": int(n), "why": why} for arm, n, why in unchecked],
        "passed": sum(cell["passes"] for cell in cells), "of": len(cells),
        "pending": pending,
        "verdict": "adopt" if passed and not unchecked and not pending and cells else "incomplete" if passed
        else "keep loss",
    }  # fmt: skip


def check_rule(params, runtime, cells: list[tuple[str, str]], args: argparse.Namespace) -> None:
    """``--trend``: every floor cell of ``args.arms`` with a same-kind reference under the candidate rule, the
    document rewritten after each (or printed at the end)."""
    checked, unchecked = [], [(arm, n, "not among --arms") for arm, n in cells if arm not in args.arms]
    for arm, n in [(arm, n) for arm, n in cells if arm in args.arms]:
        name = f"{arm}_{params.data_hunger.offline_sizes.index(int(n))}.json"
        reference = same_kind_reference(args.reference, name, runtime.describe())
        if reference is None:
            unchecked.append((arm, n, f"no {name} of the committed rule from this CPU kind and precision"))
        else:
            checked.append((arm, n, reference))
    results = []
    for arm, n, reference in checked:
        results.append(rule_cell(params, runtime, arm, n, reference))
        if args.out:
            document = rule_document(runtime, results, unchecked, pending=len(checked) - len(results))
            write_text(args.out, json.dumps(document, indent=1) + "\n")
    if not args.out:
        print(json.dumps(rule_document(runtime, results, unchecked), indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=int, default=5, help="the lower floor's windows, in scores (default 5)")
    parser.add_argument("--trend", choices=("accuracy",), help="check the candidate rule instead (see above)")
    reference_help = "--trend: folders of the committed rule's point files; each cell's from this CPU kind is used"
    parser.add_argument("--reference", type=Path, nargs="+", help=reference_help)
    parser.add_argument("--arms", nargs="+", choices=TRAINED, default=TRAINED, help="--trend: the arms to check")
    at_floor_help = "each kept run at the floor of the committed point files, again at its rate and a lower floor"
    parser.add_argument("--at-floor", action="store_true", help=at_floor_help)
    parser.add_argument("--out", type=Path, help="rewritten after every cell (default: printed at the end)")
    args = parser.parse_args()
    if args.trend and args.at_floor:
        parser.error("--trend and --at-floor are two different checks: give one of them")
    if args.trend and not args.reference:
        parser.error("--trend needs --reference: the committed rule's point files from this machine")
    params = load_params()
    runtime = resolve_runtime(params.runtime)
    cells = floor_cells(read_json(Path("metrics/data_hunger.json")))
    if args.trend:
        check_rule(params, runtime, cells, args)
        return
    results = []
    if args.at_floor:
        windows = {"committed": params.data_hunger.plateau_window, "lower": args.window}
        document = {"runtime": runtime.describe(), "windows": windows, "cells": results}  # filled cell by cell
        for arm, n in cells:
            results.append(floor_runs_cell(params, runtime, arm, n, args.window, Path("metrics/data_hunger")))
            if args.out:
                write_text(args.out, json.dumps(document, indent=1) + "\n")
        if not args.out:
            print(json.dumps(document, indent=1))
        return

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
