"""Would successive halving of the choice seeds, or a monitor for the plateau rule, have changed a choice, and what
would they have spared? Replayed on finished point files alone: nothing trains and no test score is read.

    python benchmarks/halving_replay.py metrics/data_hunger metrics/replication > metrics/halving_replay.json

Successive halving (``data_hunger.choice_keep``, :func:`pipeline.arms.protocol.beyond_best`): every learning rate
trains on the first choice seed, as now; only the ``keep`` best there (accuracy, then loss; of equals the smaller
rate) go on to the other choice seeds. Each trained cell (the ViT from scratch, the small ResNet, fine-tuning, at
every size) is replayed from its ``lr_trials``, which hold each rate's score on every seed it trained: a rate that
halving stops keeps its first seed's run alone, and the choice is the best mean over the survivors' seeds (the
rates ``prune_z`` pruned stay pruned). ``same_choice`` says whether the cell's rate is the one the sweep chose;
``runs`` counts the training runs the sweep made (every rate on each seed it trained, the chosen rate's other seeds
once) and would make.

The monitor (``data_hunger.monitor_per_class``): each kept run scored the whole validation split at every point
of its curve; with a monitor of m images per class it scores m x classes images there and the whole split once, at
its end. ``val_images`` counts both for the kept runs (a candidate's runs that were not kept record no curve). A
monitor changes which weights are kept and when a run stops, which no replay can say: the full run does.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

from pipeline.arms.protocol import beyond_best, choose_lr
from pipeline.core.arm_registry import TRAINED

POINTS = range(5)
KEEPS = (1, 2, 3)
MONITOR_PER_CLASS = 100


def first_seed_scores(trials: dict) -> dict[float, dict]:
    """Each rate's scores on the first choice seed, in the grid's increasing order."""
    first = min(min(int(seed) for seed in trial["seeds"]) for trial in trials.values())
    return {float(lr): trials[lr]["seeds"][str(first)] for lr in sorted(trials, key=float)}


def replay(point: dict, keep: int) -> dict:
    """One cell under successive halving to ``keep`` rates: the choice, whether it is the sweep's, and the runs."""
    trials = point["lr_trials"]
    stopped = beyond_best(first_seed_scores(trials), keep)
    survivors = [lr for lr in sorted(trials, key=float) if not trials[lr]["pruned"] and float(lr) not in stopped]
    chosen = choose_lr([(trials[lr], float(lr)) for lr in survivors])[1]
    other_seeds = len(point["runs"]) - len(trials[str(point["lr"])]["seeds"])
    runs = sum(1 if float(lr) in stopped else len(trial["seeds"]) for lr, trial in trials.items()) + other_seeds
    return {"chosen": chosen, "same_choice": chosen == point["lr"], "runs": runs}


def monitor_images(point: dict, monitor: int) -> dict[str, int]:
    """The validation images the kept runs scored, and would score with a monitor of ``monitor`` images."""
    kept = point["runs"].values()
    scores = sum(len(run["curve"]) for run in kept)
    return {"now": scores * point["n_val"], "monitored": scores * monitor + len(kept) * point["n_val"]}


def folder_replay(folder: Path, classes: int) -> dict:
    """Every trained cell of ``folder`` (``<arm>_<point>.json``) replayed at each ``KEEPS``, with totals; the
    monitor holds ``MONITOR_PER_CLASS`` images of each of ``classes``."""
    cells, totals = {}, {"cells": 0, "runs_now": 0, "val_images_now": 0, "val_images_monitored": 0}
    totals |= {f"keep {keep}": {"choices_changed": 0, "runs": 0} for keep in KEEPS}
    for arm in TRAINED:
        for index in POINTS:
            point = json.loads((folder / f"{arm}_{index}.json").read_text())
            runs_now = replay(point, 0)["runs"]  # keep 0 stops no rate: the runs the sweep made
            images = monitor_images(point, MONITOR_PER_CLASS * classes)
            cell = {"sweep_chose": point["lr"], "runs_now": runs_now, "val_images": images}
            totals["cells"] += 1
            totals["runs_now"] += runs_now
            totals["val_images_now"] += images["now"]
            totals["val_images_monitored"] += images["monitored"]
            for keep in KEEPS:
                cell[f"keep {keep}"] = result = replay(point, keep)
                totals[f"keep {keep}"]["choices_changed"] += not result["same_choice"]
                totals[f"keep {keep}"]["runs"] += result["runs"]
            cells[f"{arm}@{point['n_train_per_class']}"] = cell
    return {"totals": totals, "cells": cells}


def main(argv: list[str]) -> None:
    if not argv:
        sys.exit(__doc__)
    classes = len(yaml.safe_load(Path("params.yaml").read_text())["offline"]["classes"])
    replays = {folder: folder_replay(Path(folder), classes) for folder in argv}
    print(json.dumps({"monitor_per_class": MONITOR_PER_CLASS, "classes": classes, **replays}, indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
