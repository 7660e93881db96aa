"""Would a wider learning-rate grid have chosen differently? One step past every choice at an end of its grid.

    python benchmarks/grid_edges.py [--reproduce ARM:POINT ...] --out metrics/grid_edges.json

Run in a project whose ``data/prepared`` and ``models/`` are the full data's, in the precision of the committed
run (``metrics/data_hunger/*.json`` name it in ``runtime``). For every trained arm's point whose learning rate sits
at an end of its grid (``lr_at_edge``: low | high), it trains the seeds that choose (the first
``data_hunger.choice_seeds``; the later ones only if the sweeps' pruning rule lets the new value past the first)
at the next value of the grid's 1-3-10 sequence past that end (0.003 -> 0.01, 0.0003 -> 0.0001), under the
committed protocol (budget, plateau schedule, validation rule), and chooses from the committed grid's scores
(``lr_trials``) and the new value's with the sweeps' own rule (pruning on the first seed, the best mean
validation score, ``protocol.choose_lr``). ``choice_holds`` is true where the edge value is still chosen: the
wider grid would have kept the committed choice, so it lies inside that grid. The probes' ridge grid (x10 steps)
gets the same check for every seed whose ridge is at an end
(``reg_at_edge``; the ridge is chosen per seed, in closed form, so each such seed is refitted with the grid one
step wider and ``choice_holds`` says whether it keeps its ridge). Where it is false, the grid in params.yaml is
to be widened and its arm rerun (that is how the small ResNet's and fine-tuning's grids got their present
ends). The test set is never scored. ``make results-write`` puts the file's tables in docs/results.md.

``--reproduce ARM:POINT`` first reruns the committed edge value itself for that point and says whether it gives
the committed first seed's validation score exactly: the check that this machine and precision reproduce the
committed run, so that the two scores compared above come from the same computation.

``--same-precision [ARM:POINT ...]`` is for a point that ran in another precision or CPU kind than this machine's
(its ``runtime``): the edge value is also trained here on the seeds the new value ran on, and
``same_precision_holds`` says whether it still beats the new value with both in this machine's precision (the
sweeps' rule between the two: the better mean validation accuracy, then loss). ``--same-precision`` alone takes
every such point. ``--beyond-from FILE`` takes the new values' runs from an earlier output of this script on a
machine of this kind and precision (where it holds them), and keeps its ``reproduced`` records, so that only
what is missing trains."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path

from pipeline.arms.protocol import Choice, Curve, choose_lr, mean_score, pruned
from pipeline.core.arm_registry import TRAINED, arm_module
from pipeline.core.params_yaml import load_params
from pipeline.data.subsets import point_path
from pipeline.train.runtime import resolve_runtime

KEPT = ("val_acc", "val_loss", "best_step", "steps", "budget", "cap", "decay_step", "stopped_at_cap")


def grid_index(lr: float) -> int:
    """The place of ``lr`` in the sequence ..., 0.0001, 0.0003, 0.001, 0.003, 0.01, ... (even: 10^k, odd: 3x)."""
    return round(2 * math.log10(lr))


def grid_value(index: int) -> float:
    return float(f"{(1 if index % 2 == 0 else 3) * 10.0 ** (index // 2):.1g}")


def beyond(lr: float, side: str) -> float:
    """The next value of the sequence past ``lr`` on ``side`` (low | high)."""
    return grid_value(grid_index(lr) + (1 if side == "high" else -1))


def committed_points(arms, folder: Path | None = None):
    """Every committed point file of ``arms``, read once each, in arm then file order."""
    for arm in arms:
        for path in sorted((folder or Path(point_path(arm, 0)).parent).glob(f"{arm}_*.json")):
            yield json.loads(path.read_text())


def edge_points(arms=TRAINED, folder: Path | None = None) -> list[dict]:
    """Every committed point whose chosen learning rate sits at an end of its grid."""
    found = [point for point in committed_points(arms, folder) if point.get("lr_at_edge")]
    return sorted(found, key=lambda p: (p["point"], TRAINED.index(p["arm"])))  # the cheap, small points first


PROBES = ("linear", "pixels")  # the arms whose only choice is the ridge (fine-tuning starts from linear's probe)


def ridge_edges(folder: Path | None = None) -> list[tuple[dict, int]]:
    """Every committed probe point and seed index whose chosen ridge sits at an end of the grid."""
    return [(point, i) for point in committed_points(PROBES, folder)
            for i, edge in enumerate(point.get("reg_at_edge", [])) if edge]  # fmt: skip


def ridge_check(curve: Curve, seeds: list[int], point: dict, index: int) -> dict:
    """Refits one seed's probe with the ridge grid one x10 step wider on the side of its choice."""
    chosen, side = point["reg"][index], point["reg_at_edge"][index]
    past = chosen * 10 if side == "high" else chosen / 10
    wider = dataclasses.replace(curve.config, probe_regs=sorted([*curve.config.probe_regs, past]))
    wider_curve, module = dataclasses.replace(curve, config=wider), arm_module(point["arm"])
    run = module.run_seed(wider_curve, module.point_data(wider_curve, point["point"]), seeds[index])
    return {
        "arm": point["arm"], "point": point["point"], "n_train_per_class": point["n_train_per_class"],
        "seed": seeds[index], "side": side, "chosen": chosen,
        "chosen_val_acc": point["runs"][str(seeds[index])]["val_acc"], "beyond": past,
        "chosen_in_wider_grid": run["reg"], "val_acc": run["val_acc"], "choice_holds": run["reg"] == chosen,
    }  # fmt: skip


def first_seed_run(module, curve: Curve, data: dict, seed: int, lr: float) -> dict:
    run = module.run_seed(curve, data, seed, lr)
    run.pop("score")  # the test set is never scored here
    return {k: run[k] for k in KEPT if k in run}


def seed_score(trial: dict, seed: int) -> dict:
    """A committed candidate's validation score on ``seed`` (with one choice seed, its record is that score)."""
    return trial.get("seeds", {}).get(str(seed), trial)


def wider_grid_choice(point: dict, lr: float, runs: list[dict], choosing: list[int], choice: Choice):
    """The learning rate the sweep's own rule (``protocol.seed_protocol``) would choose from the committed grid
    plus ``lr``, whose runs on the choice seeds are ``runs`` (the first alone if pruning stops it), and whether
    ``lr`` was pruned. Adding a candidate never spares one the committed run pruned (a new leader only raises
    the bar), so every unpruned committed candidate has its full mean in ``lr_trials``."""
    trials = {float(key): trial for key, trial in point["lr_trials"].items()}
    first = {value: seed_score(trial, choosing[0]) for value, trial in trials.items()} | {lr: runs[0]}
    dropped = pruned(first, choice.n_val, choice.prune_z if len(choosing) > 1 else 0.0)
    means = {value: mean_score([trial]) for value, trial in trials.items()} | {lr: mean_score(runs)}
    return choose_lr([(means[value], value) for value in sorted(means) if value not in dropped])[1], lr in dropped


def beyond_runs(module, curve: Curve, data: dict, point: dict, lr: float, choosing: list[int], choice: Choice):
    """``lr`` trained on the first choice seed and, unless pruning stops it there, on the other choice seeds."""
    runs = [first_seed_run(module, curve, data, choosing[0], lr)]
    if not wider_grid_choice(point, lr, runs, choosing, choice)[1]:
        runs += [first_seed_run(module, curve, data, seed, lr) for seed in choosing[1:]]
    return runs


def same_precision(asked: list[str] | None, spec: str, committed_runtime: str, here: str) -> bool:
    """Whether ``spec``'s edge value is retrained here: named in ``--same-precision``, or, with the flag alone,
    committed in another precision or CPU kind than this machine's."""
    if asked is None:
        return False
    return spec in asked if asked else committed_runtime != here


def same_precision_check(edge: float, edge_runs: list[dict], lr: float, runs: list[dict], seeds: list[int]) -> dict:
    """The edge value and the new one, both trained here on ``seeds``: the sweeps' rule between the two."""
    kept = choose_lr(sorted([(mean_score(edge_runs), edge), (mean_score(runs), lr)], key=lambda c: c[1]))[1]
    return {
        "same_precision_seeds": seeds, "same_precision_edge_run": summary_run(edge_runs),
        "same_precision_edge_seeds": edge_runs, "same_precision_holds": kept == edge,
    }  # fmt: skip


def summary_run(runs: list[dict]) -> dict:
    """The table's record of one candidate: its mean validation score and each run's kept / last step."""
    return mean_score(runs) | {key: ", ".join(str(run[key]) for run in runs) for key in ("best_step", "steps")}


def sweep_curve(params, runtime) -> Curve:
    """The curve as the sweep stage builds it, its transfer arms' backbones included (seed i fine-tunes and probes
    backbone i mod ``backbone_count``): with one, seeds 1 and 2 would run on backbone 0's features."""
    return Curve(params.preset, params.model_name, params.backbone_model_name, params.backbone_source,
                 params.data_hunger, params.evaluate.batch_size, runtime, params.backbone_count)  # fmt: skip


def read_earlier(parser: argparse.ArgumentParser, path: Path) -> dict:
    """An earlier output of this script for ``--beyond-from``; a missing or unreadable file ends in one message."""
    try:
        earlier = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        parser.error(f"--beyond-from {path}: {error}; give a file an earlier --out of this script wrote")
    if not isinstance(earlier, dict) or not isinstance(earlier.get("runs"), list):
        parser.error(f"--beyond-from {path}: not an output of this script (no runs list)")
    return earlier


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reproduce", nargs="*", default=[], help="ARM:POINT whose edge value is rerun first")
    parser.add_argument("--only", nargs="*", default=[], help="ARM:POINT to run (default: every edge)")
    parser.add_argument("--out", type=Path, help="rewritten after every run (default: printed at the end)")
    parser.add_argument(
        "--same-precision",
        nargs="*",
        default=None,
        help="ARM:POINT (default: every edge point run elsewhere) whose edge value is retrained here",
    )
    parser.add_argument("--beyond-from", type=Path, help="an earlier output whose new-value runs are reused")
    args = parser.parse_args()
    params = load_params()
    runtime = resolve_runtime(params.runtime)
    curve = sweep_curve(params, runtime)
    choice = Choice(params.data_hunger.choice_seeds, params.data_hunger.prune_z, n_val=0)
    choosing = params.seeds[: choice.seeds]
    seed = choosing[0]
    results, reproduced, ridges = [], [], []
    edges = edge_points()
    earlier = read_earlier(parser, args.beyond_from) if args.beyond_from else {}
    earlier_runs = earlier.get("runs", [])
    reproduced += earlier.get("reproduced", [])  # what the earlier output reproduced stays on record
    committed_runtime = sorted({p["runtime"] for p in edges})

    def document() -> str:
        return json.dumps({
            "runtime": runtime.describe(),
            "committed_runtime": committed_runtime,
            "seed": seed,
            "choice_seeds": choosing,
            "holds": sum(r["choice_holds"] for r in results),
            "of": len(results),
            "reproduced": reproduced,
            "runs": results,
            "ridge_holds": sum(r["choice_holds"] for r in ridges),
            "ridge_of": len(ridges),
            "ridge_runs": ridges,
        }, indent=1) + "\n"  # fmt: skip

    for point in edges:
        arm, index, edge, side = point["arm"], point["point"], point["lr"], point["lr_at_edge"]
        spec = f"{arm}:{index}"
        if args.only and spec not in args.only:
            continue
        module = arm_module(arm)
        data = module.point_data(curve, index)
        committed = point["lr_trials"][f"{edge:g}"]
        edge_here = {}  # seed -> the edge value trained here, once, for --reproduce and --same-precision both
        if spec in args.reproduce:
            again = edge_here[seed] = first_seed_run(module, curve, data, seed, edge)
            first = seed_score(committed, seed)
            reproduced.append({"arm": arm, "point": index, "lr": edge, "committed": first, "rerun": again,
                               "exact": again["val_acc"] == first["val_acc"]
                               and again["val_loss"] == first["val_loss"]})  # fmt: skip
        lr = beyond(edge, side)
        point_choice = dataclasses.replace(choice, n_val=point["n_val"])
        ran = [r["beyond_seeds"] for r in earlier_runs if (r["arm"], r["point"], r["beyond"]) == (arm, index, lr)]
        runs = ran[0] if ran else beyond_runs(module, curve, data, point, lr, choosing, point_choice)
        chosen, was_pruned = wider_grid_choice(point, lr, runs, choosing, point_choice)
        results.append({
            "arm": arm, "point": index, "n_train_per_class": point["n_train_per_class"], "side": side,
            "grid": sorted(float(k) for k in point["lr_trials"]), "chosen": edge, "committed_runtime": point["runtime"],
            "chosen_val": mean_score([committed]), "beyond": lr, "beyond_run": summary_run(runs),
            "beyond_seeds": runs, "beyond_pruned": was_pruned, "chosen_in_wider_grid": chosen,
            "choice_holds": chosen == edge,
        })  # fmt: skip
        if same_precision(args.same_precision, spec, point["runtime"], runtime.describe()):
            seeds = choosing[: len(runs)]
            edge_runs = [edge_here.get(s) or first_seed_run(module, curve, data, s, edge) for s in seeds]
            results[-1] |= same_precision_check(edge, edge_runs, lr, runs, seeds)
        if args.out:
            args.out.write_text(document())
    for point, index in ridge_edges():
        if not args.only or f"{point['arm']}:{point['point']}" in args.only:
            ridges.append(ridge_check(curve, params.seeds, point, index))
    if args.out:
        args.out.write_text(document())
    else:
        print(document(), end="")


if __name__ == "__main__":
    main()
