"""A stage process's fixed cost: seconds from its start to its first optimiser step, against a bare
``python -c "import torch"`` process timed in alternation with it (the floor no stage process goes under).

The stage is ``python -m pipeline.stages.sweep scratch 0`` on the project's prepared data (``dvc repro prepare``
first), started through a wrapper that stops the process at its first call of ``pipeline.train.loop.optimizer_step``,
before it writes any output; its MLflow runs go to a throwaway store in a temporary folder. The clock starts in
this process just before the child is spawned and stops at the child's first step (one wall clock, one machine),
so it counts the interpreter, every import, the params, the data, the step-0 score and MLflow's start as far as
the stage waits for it. Issue 19's target is 3 s on an idle 2-core machine::

    .venv/bin/python benchmarks/stage_start.py --reps 5

Time it on an idle machine: another torch process on the same cores slows both several times over.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAGE = ["pipeline.stages.sweep", "scratch", "0"]
# Runs the stage as `python -m` would, and leaves at its first optimiser step with the time it got there.
UNTIL_FIRST_STEP = """
import os, runpy, sys, time
import pipeline.train.loop

def first_step(*args, **kwargs):
    print(f"first step at {time.time():.6f}", flush=True)
    os._exit(0)

pipeline.train.loop.optimizer_step = first_step
module, *args = sys.argv[1:]
sys.argv = [module, *args]
runpy.run_module(module, run_name="__main__", alter_sys=True)
raise SystemExit("the stage ended without an optimiser step")
"""


def seconds_to_first_step(env: dict[str, str]) -> float:
    started = time.time()
    done = subprocess.run([sys.executable, "-c", UNTIL_FIRST_STEP, *STAGE], cwd=ROOT, env=env, capture_output=True,
                          text=True)  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if line.startswith("first step at ")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"the stage did not reach its first step (exit {done.returncode}):\n{done.stderr[-2000:]}")
    return float(lines[-1].removeprefix("first step at ")) - started


def seconds_to_import_torch(env: dict[str, str]) -> float:
    started = time.time()
    subprocess.run([sys.executable, "-c", "import torch"], cwd=ROOT, env=env, check=True)
    return time.time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5, help="timed runs of each, after one warm-up of each")
    args = parser.parse_args()
    if not (ROOT / "data" / "prepared" / "manifest.csv").is_file():
        raise SystemExit("no prepared data: run `dvc repro prepare` (or `make repro`) first")
    with tempfile.TemporaryDirectory() as store:
        env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{store}/mlflow.db", "PIPELINE_SYSTEM_METRICS": "0"}
        seconds_to_import_torch(env), seconds_to_first_step(env)  # warm-ups: page cache, the store's tables
        stage, torch_only = [], []
        for _ in range(args.reps):
            stage.append(seconds_to_first_step(env))
            torch_only.append(seconds_to_import_torch(env))
    for what, seconds in ((f"`python -m {' '.join(STAGE)}` to its first optimiser step", stage),
                          ("`python -c 'import torch'` alone", torch_only)):  # fmt: skip
        print(f"{what}, {args.reps} runs (s): min {min(seconds):.2f}, median {statistics.median(seconds):.2f}, "
              f"max {max(seconds):.2f}")  # fmt: skip
    ratio = statistics.median(stage) / statistics.median(torch_only)
    print(f"ratio of medians, stage start / torch import: {ratio:.2f}x")


if __name__ == "__main__":
    main()
