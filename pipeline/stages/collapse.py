"""Stage collapse: seed 000's from-scratch collapse, isolated one change at a time.

The curve's protocol differs from seed 000's recipe in several ways at once: the optimiser and how it applies the
weight decay, the learning rate, warmup, clipping, the batch and number of steps (until the validation curve levels
off), and crop/flip augmentation. At the curve's headline size (``data_hunger.headline_point``: 75 per class
offline), every seed trains seed 000's recipe (``train_scratch.<preset>``) and that recipe with one change toward
the protocol (``pipeline.arms.scratch.TOWARD_PROTOCOL``; ``protocol`` changes them all), on the seed's own images;
each change is reported as a paired difference against seed 000's recipe over the seeds. The protocol's learning
rate is the one the curve chose on validation at this size (``metrics/data_hunger/scratch_<point>.json``); the
test set is scored once per run, at the end, and chooses nothing.

Writes ``metrics/collapse.json``.
"""

from __future__ import annotations

import dataclasses

from pipeline.arms.protocol import Curve
from pipeline.arms.scratch import TOWARD_PROTOCOL, point_data, run_toward_protocol, toward_protocol
from pipeline.core import paths
from pipeline.core.config import Params
from pipeline.core.entry import stage_main
from pipeline.core.files import read_json, write_json
from pipeline.core.logs import stage_log as log
from pipeline.core.params_yaml import load_params
from pipeline.data.subsets import point_path, seed_subset
from pipeline.results.stats import paired_difference, spread
from pipeline.tracking.tracker import stage_tracker
from pipeline.train.runtime import resolve_runtime

OUTPUT = paths.METRICS / "collapse.json"


def run_collapse(params: Params) -> dict:
    """Every change of ``TOWARD_PROTOCOL`` over every seed; the summary with each change's paired difference."""
    runtime = resolve_runtime(params.runtime)
    curve = Curve(params.preset, params.model_name, params.backbone_model_name, params.backbone_source,
                  params.data_hunger, params.evaluate.batch_size, runtime)  # fmt: skip
    point = params.data_hunger.headline_point
    data = point_data(curve, point)
    lr = read_json(point_path("scratch", point))["lr"]
    runs, recipes = {}, {}
    with stage_tracker(params, "collapse", runtime=runtime, arm="scratch", n_train_per_class=str(data.n)) as stage:
        for change in TOWARD_PROTOCOL:
            recipe, plateau = toward_protocol(change, params.scratch_recipe, params.data_hunger.scratch, lr)
            recipes[change] = dataclasses.asdict(recipe) | {"validation_rule": plateau}
            runs[change] = []
            for seed in params.seeds:
                differs = {"change": change, "seed": str(seed)}
                with stage.child(f"collapse-{change}-seed{seed}", differs, **differs) as tracker:
                    run = run_toward_protocol(curve, data, seed, recipe, plateau)
                    tracker.log_metrics(run | {"final_test_acc": run["test_acc"]})
                runs[change].append(run)
                log.info(f"collapse {change}, seed {seed}: test_acc {run['test_acc']:.4f}, collapse "
                         f"{run['collapse']:.2f}, {run['steps']} steps")  # fmt: skip
    seed_acc = [run["test_acc"] for run in runs["seed"]]
    return {
        "preset": params.preset, "point": point, "n_train_per_class": data.n,
        "n_train": len(seed_subset(data.pool, data.n, params.seeds[0])), "n_val": len(data.val),
        "n_test": len(data.test), "seeds": list(params.seeds), "protocol_lr": lr, "order": list(runs),
        "changes": {name: {"description": TOWARD_PROTOCOL[name], "recipe": recipes[name]} for name in runs},
        "runs": {name: {key: spread([r[key] for r in rs]) for key in rs[0]} for name, rs in runs.items()},
        "against_seed": {name: paired_difference([r["test_acc"] for r in rs], seed_acc)
                         for name, rs in runs.items() if name != "seed"},
        "runtime": runtime.describe(),
    }  # fmt: skip


@stage_main
def main() -> None:
    params = load_params()
    summary = run_collapse(params)
    write_json(OUTPUT, summary)
    for name, d in summary["against_seed"].items():
        log.info(f"collapse {name} - seed: {d['mean']:+.4f} [{d['low']:+.4f}, {d['high']:+.4f}] {d['verdict']}")


if __name__ == "__main__":
    main()
