"""Where the curve's training compute goes, counted from point files alone, against an older protocol's:

    python benchmarks/compute_accounting.py d7f9139 > metrics/compute_accounting.json

For each trained arm (the ViT from scratch, the small ResNet, fine-tuning) and size, in the committed point files
(``metrics/data_hunger/``) and in those of a git revision (issue 21's full run was timed at d7f9139): ``runs``, the
training runs the sweep made (every learning-rate candidate on each seed it trained, plus the other seeds at the
chosen rate); ``kept_steps``, the optimiser steps of the kept runs; ``train_images``, the training images those steps
took (``data_hunger.batch_size`` each, the last batch of an epoch smaller); ``val_images``, the validation images
the kept runs scored (each score is the whole validation split: a forward pass, where a training image costs a
forward and a backward pass). A candidate's runs that were not kept record no step count, so the steps and scores
of the choice itself are not counted; ``runs`` is. ``ratio`` divides the committed protocol's count by the older
one's, per cell and for the whole curve: what a stage's time grows with (the times themselves, per machine, are in
``metrics/repro_time.json``).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import yaml

ARMS = ("scratch", "cnn", "finetune")
POINTS = range(5)
COMMITTED = Path("metrics/data_hunger")
COUNTS = ("runs", "kept_steps", "train_images", "val_images")


def sweep_runs(point: dict) -> int:
    """Training runs a sweep made: each candidate on the seeds it trained (``lr_trials[lr]["seeds"]``, issue 37),
    the chosen rate's other seeds once; where the trials name no seeds (issue 21: the rate chosen on the first seed
    alone), one run a candidate."""
    trials = point["lr_trials"]
    if all("seeds" not in trial for trial in trials.values()):
        return len(trials) + len(point["runs"]) - 1
    chosen = trials.get(str(point["lr"]), {}).get("seeds", [])
    return sum(len(trial["seeds"]) for trial in trials.values()) + len(point["runs"]) - len(chosen)


def cell_counts(point: dict, batch_size: int) -> dict[str, int]:
    """The counts of one point file; an epoch of ``n_train`` images is ``ceil(n_train / batch_size)`` steps. A run
    with a monitor (``n_monitor`` in the point file) scores it at each point of its curve and the whole validation
    split once, at its end."""
    kept = point["runs"].values()
    steps = sum(run["steps"] for run in kept)
    n_train = point["n_train"]
    scores = sum(len(run["curve"]) for run in kept)
    monitor = point.get("n_monitor")
    return {
        "runs": sweep_runs(point),
        "kept_steps": steps,
        "train_images": round(steps * n_train / math.ceil(n_train / batch_size)),
        "val_images": scores * point["n_val"] if monitor is None else scores * monitor + len(kept) * point["n_val"],
    }


def ratios(after: dict[str, int], before: dict[str, int]) -> dict[str, float]:
    return {key: round(after[key] / before[key], 2) for key in COUNTS if before[key]}


def at_revision(revision: str, path: Path) -> str:
    """A committed file as it was at ``revision``."""
    return subprocess.run(["git", "show", f"{revision}:{path}"], capture_output=True, text=True, check=True).stdout


def batch_size(params_text: str) -> int:
    return yaml.safe_load(params_text)["data_hunger"]["batch_size"]


def accounting(read_before, read_after, batch_before: int, batch_after: int) -> dict:
    """Per cell (``scratch@10``: arm and images per class) both protocols' counts and their ratio, then totals.
    ``read_before`` / ``read_after`` map a point file's name to its contents."""
    cells, totals = {}, {"before": dict.fromkeys(COUNTS, 0), "after": dict.fromkeys(COUNTS, 0)}
    for arm in ARMS:
        for point in POINTS:
            name = f"{arm}_{point}.json"
            before, after = read_before(name), read_after(name)
            counts = {"before": cell_counts(before, batch_before), "after": cell_counts(after, batch_after)}
            counts["ratio"] = ratios(counts["after"], counts["before"])
            cells[f"{arm}@{after['n_train_per_class']}"] = counts
            for side in ("before", "after"):
                for key in COUNTS:
                    totals[side][key] += counts[side][key]
    totals["ratio"] = ratios(totals["after"], totals["before"])
    return {"cells": cells, "totals": totals}


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        sys.exit(__doc__)
    revision = argv[0]
    result = accounting(
        lambda name: json.loads(at_revision(revision, COMMITTED / name)),
        lambda name: json.loads((COMMITTED / name).read_text()),
        batch_size(at_revision(revision, Path("params.yaml"))),
        batch_size(Path("params.yaml").read_text()),
    )
    print(json.dumps({"before": f"{revision}:{COMMITTED}", "after": str(COMMITTED), **result}, indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
