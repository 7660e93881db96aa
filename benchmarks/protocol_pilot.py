"""Does a schedule let the curve's trained runs end on their own? One seed's run per (arm, point, lr) under a
given schedule (the pilot that adopted ``plateau`` ran it while ``cosine`` was committed), beside the committed run
of that seed at that lr.

    python benchmarks/protocol_pilot.py --schedule plateau scratch:2:0.001 cnn:3:0.003 > metrics/protocol_pilot.json

Run in a project whose ``data/prepared`` and ``models/`` are the full data's (after ``dvc repro`` up to the
sweeps): each ``ARM:POINT:LR`` trains seed 0 of that arm at that point and learning rate with
``data_hunger.<arm>.schedule`` replaced, under params.yaml's budget, ``cap_factor`` and ``cooldown_fraction``, and
prints the validation side only (the kept step, where the decay began, the steps run, whether the cap stopped it,
the kept validation accuracy and loss); the test set is never scored. The committed run of the same seed and lr
comes from ``metrics/data_hunger/<arm>_<point>.json`` when that point chose the same lr. The choice of the
protocol reads this file, never a test score."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from pipeline.arms.protocol import Curve
from pipeline.core.arm_registry import TRAINED, arm_module
from pipeline.core.params_yaml import load_params
from pipeline.data.subsets import point_path
from pipeline.train.runtime import resolve_runtime

KEPT = ("best_step", "decay_step", "steps", "budget", "cap", "stopped_at_cap", "val_acc", "val_loss", "train_acc")


def committed_run(arm: str, point: int, lr: float, seed: int) -> dict | None:
    """The committed point file's run of ``seed``, if that point ran it at ``lr``."""
    path = Path(point_path(arm, point))
    if not path.exists():
        return None
    run = json.loads(path.read_text())["runs"].get(str(seed))
    return {k: run.get(k) for k in KEPT if k in run} if run and run["lr"] == lr else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedule", default="plateau", choices=["none", "cosine", "plateau"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("runs", nargs="+", help="ARM:POINT:LR, e.g. scratch:2:0.001")
    args = parser.parse_args()
    params = load_params()
    runtime = resolve_runtime(params.runtime)
    results = []
    for spec in args.runs:
        arm, point, lr = spec.split(":")
        point, lr = int(point), float(lr)
        if arm not in TRAINED:
            parser.error(f"{arm} is not a trained arm ({', '.join(TRAINED)})")
        optimiser = dataclasses.replace(getattr(params.data_hunger, arm), schedule=args.schedule)
        config = dataclasses.replace(params.data_hunger, **{arm: optimiser})
        curve = Curve(params.preset, params.model_name, params.backbone_model_name, params.backbone_source, config,
                      params.evaluate.batch_size, runtime, params.backbone_count)  # fmt: skip
        module = arm_module(arm)
        data = module.point_data(curve, point)
        run = module.run_seed(curve, data, args.seed, lr)
        results.append({
            "arm": arm, "point": point, "n_train_per_class": data["n"], "lr": lr, "seed": args.seed,
            args.schedule: {k: run[k] for k in KEPT if k in run},
            "committed": committed_run(arm, point, lr, args.seed),
            "val_acc_curve": [[r["step"], r["val_acc"]] for r in run["curve"]],
        })  # fmt: skip
    print(json.dumps({"schedule": args.schedule, "runtime": runtime.describe(), "runs": results}, indent=1))


if __name__ == "__main__":
    main()
