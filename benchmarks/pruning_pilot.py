"""Would stopping a losing learning rate part way through its run change a choice, and how much would it save? A
pilot on the validation curves that finished sweeps left in MLflow: nothing trains and no test score is read.

    python benchmarks/pruning_pilot.py --store ../rerun_adopted \\
        --points ../rerun_adopted/metrics/data_hunger --out metrics/pruning_pilot/adopted_rule.json

``--store`` is a project whose ``mlflow.db`` holds the sweeps' runs, ``--points`` the folder of their point files
(``<arm>_<point>.json``). The sweeps' choice (``protocol.choose_on_validation``) trains every rate of the grid to
the end of its run on the first choice seed, drops those ``prune_z`` standard errors behind, trains the rest on the
other choice seeds and keeps the best mean validation score. The rule piloted here adds a check inside each run of
the choice seeds: at the first scored step at or past ``fraction`` x the size's budget, a run whose best validation
accuracy so far is more than ``z`` standard errors of a difference (sqrt(2) x one accuracy's, at the leader's
accuracy) behind the best so far, at the same step, of the rates that ran before it on the same seed stops there;
its rate trains no further seed and cannot be chosen. Each cell's runs are replayed in the order they ran, so a rate
is only ever compared with rates already trained, as a sweep would compare them (``interleaved`` settings compare
it with every rate of its seed instead, as successive halving's rungs would). The last settings add no check and
prune harder between seeds: a smaller ``prune_z`` on the first seed's full runs.

Per cell and setting it reports the sweep's choice and the rule's, the runs stopped (seed, rate, step) and the
seconds saved: the rest of each stopped run (its ``wall_time_s`` x the share of its steps after the check) and the
whole of each choice-seed run the stop spared. A setting that never stops the rate the sweep chose saves time at
no change to any number; one that does would have changed that cell's choice. With no check the replay must give
every cell the sweep's own choice (``replay_matches``), which tests the replay. Reading the result chooses a rule
for a later run; that run, not this pilot, says what it does to the curve."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import NamedTuple

from pipeline.arms.protocol import accuracy_se, choose_lr, mean_score, pruned
from pipeline.core.arm_registry import TRAINED
from pipeline.core.files import read_json, write_text
from pipeline.core.params_yaml import load_params


class Setting(NamedTuple):
    """One rule replayed: a check inside the choice seeds' runs at ``fraction`` of the budget with margin ``z``
    (None: no check), ``interleaved`` or in the order the runs ran, and the seed-0 pruning's ``prune_z`` (None:
    ``params.yaml``'s)."""

    fraction: float | None
    z: float = 0.0
    interleaved: bool = False
    prune_z: float | None = None

    def name(self) -> str:
        check = "no check" if self.fraction is None else (
            f"{'interleaved' if self.interleaved else 'as run'}: check at {self.fraction:g} of the budget, z {self.z:g}"
        )  # fmt: skip
        return check + ("" if self.prune_z is None else f"; prune_z {self.prune_z:g}")


SETTINGS = [
    *(Setting(fraction, z, interleaved)
      for interleaved in (False, True) for fraction in (0.25, 0.5) for z in (2.0, 3.0)),
    *(Setting(None, prune_z=prune_z) for prune_z in (2.0, 1.0)),
]  # fmt: skip


def sweep_runs(client, experiments: list[str], stage: str) -> list[dict] | None:
    """The runs of the latest finished ``stage`` (``sweep-<arm>-<n>``) in ``client``'s ``experiments``, in the
    order they ran: seed, rate, validation accuracy by step and wall time; None where the store has no such stage."""
    found = client.search_runs(experiments, f"tags.stage = '{stage}'", max_results=5000)
    parents = [r for r in found if r.info.run_name == stage and r.info.status == "FINISHED"]
    if not parents:
        return None
    parent = max(parents, key=lambda r: r.info.start_time).info.run_id
    children = sorted((r for r in found if r.data.tags.get("mlflow.parentRunId") == parent and "lr" in r.data.tags),
                      key=lambda r: r.info.start_time)  # fmt: skip
    runs = []
    for child in children:
        history = client.get_metric_history(child.info.run_id, "val_acc")
        runs.append({
            "seed": int(child.data.tags["seed"]), "lr": float(child.data.tags["lr"]),
            "val_acc": {m.step: m.value for m in history}, "wall_time_s": child.data.metrics["wall_time_s"],
        })  # fmt: skip
    return runs


def best_until(curve: dict[int, float], step: int) -> float:
    return max(value for s, value in curve.items() if s <= step)


def replay(
    point: dict, runs: list[dict], fraction: float | None, z: float, prune_z: float, interleaved: bool = False
) -> dict:
    """The cell's choice with the check at ``fraction`` of the budget (None: no check), from its point file's
    per-seed validation scores and its runs' curves; ``prune_z`` is the sweeps' own pruning on the first seed.
    ``interleaved``: every rate of a seed is compared with all the others at the check, as if the seed's runs were
    trained side by side to the check and then continued (successive halving's rung), not one after another."""
    trials = {float(lr): trial for lr, trial in point["lr_trials"].items()}
    choosing = sorted({int(s) for trial in trials.values() for s in trial["seeds"]})
    n_val, budget = point["n_val"], point["budget"]
    stopped: dict[float, tuple[int, int]] = {}
    earlier: dict[int, list[dict]] = {seed: [] for seed in choosing}
    saved = 0.0
    for run in (r for r in runs if r["seed"] in choosing):
        if run["lr"] in stopped:  # a stopped rate trains no further seed
            saved += run["wall_time_s"]
            continue
        curve, before = run["val_acc"], earlier[run["seed"]]
        if interleaved:
            before = [r for r in runs if r["seed"] == run["seed"] and r is not run and r["lr"] not in stopped]
        check = min((s for s in curve if s >= fraction * budget), default=None) if fraction else None
        if check is not None and before and check < max(curve):
            leader = max(best_until(other["val_acc"], check) for other in before)
            if leader - best_until(curve, check) > z * math.sqrt(2) * accuracy_se(leader, n_val):
                stopped[run["lr"]] = (run["seed"], check)
                saved += run["wall_time_s"] * (1 - check / max(curve))
        earlier[run["seed"]].append(run)
    first = {lr: trial["seeds"][str(choosing[0])] for lr, trial in trials.items() if lr not in stopped}
    dropped = pruned(first, n_val, prune_z) if len(choosing) > 1 else set()
    saved += sum(run["wall_time_s"] for run in runs  # the further choice seeds a stricter pruning spares
                 if run["lr"] in dropped - stopped.keys() and run["seed"] in choosing[1:])  # fmt: skip
    means = {lr: mean_score(list(trial["seeds"].values())) for lr, trial in trials.items()
             if lr not in stopped and lr not in dropped}  # fmt: skip
    chosen = choose_lr([(score, lr) for lr, score in sorted(means.items())])[1]
    total = sum(run["wall_time_s"] for run in runs)
    return {
        "chosen": chosen, "same_choice": chosen == point["lr"],
        "stopped": [{"lr": lr, "seed": seed, "step": step} for lr, (seed, step) in sorted(stopped.items())],
        "saved_s": round(saved, 1), "total_s": round(total, 1),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", type=Path, required=True, help="the project whose mlflow.db holds the sweeps")
    parser.add_argument("--points", type=Path, required=True, help="the folder of their point files")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{args.store.resolve() / 'mlflow.db'}")
    experiments = [e.experiment_id for e in client.search_experiments()]
    prune_z = load_params().data_hunger.prune_z
    cells, missing = {}, []
    for path in sorted(args.points.glob("*.json")):
        point = read_json(path)
        if point["arm"] not in TRAINED or not point.get("lr_trials"):
            continue
        runs = sweep_runs(client, experiments, f"sweep-{point['arm']}-{point['n_train_per_class']}")
        if runs is None:
            missing.append(path.stem)
            continue
        unchecked = replay(point, runs, None, 0.0, prune_z)
        cells[path.stem] = {
            "sweep_chose": point["lr"],
            "replay_matches": unchecked["same_choice"],
            "total_s": unchecked["total_s"],
            "kept_s": round(sum(run["wall_time_s"] for run in runs if run["lr"] == point["lr"]), 1),
        }
        for setting in SETTINGS:
            cells[path.stem][setting.name()] = replay(
                point, runs, setting.fraction, setting.z,
                prune_z if setting.prune_z is None else setting.prune_z, setting.interleaved,
            )  # fmt: skip
    summary = {}
    for setting in SETTINGS:
        results = [cell[setting.name()] for cell in cells.values()]
        saved, total = sum(r["saved_s"] for r in results), sum(r["total_s"] for r in results)
        summary[setting.name()] = {
            "choices_changed": sum(not r["same_choice"] for r in results), "cells": len(results),
            "saved_s": round(saved, 1), "total_s": round(total, 1), "saved_share": round(saved / total, 3),
        }  # fmt: skip
    kept, total = (sum(cell[key] for cell in cells.values()) for key in ("kept_s", "total_s"))
    summary["kept_share"] = round(kept / total, 3)  # of the sweeps' training time, the runs at the chosen rates
    report = {"store": str(args.store), "points": str(args.points), "summary": summary, "cells": cells,
              "no_runs_in_store": missing}  # fmt: skip
    write_text(args.out, json.dumps(report, indent=1) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
