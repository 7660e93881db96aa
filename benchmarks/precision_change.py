"""Do the curve's readings survive a second run in another precision (or on another CPU kind), or a replication
with fresh seeds?

    python benchmarks/precision_change.py OTHER_DIR > metrics/precision_change.json
    python benchmarks/precision_change.py metrics/replication > metrics/replication/comparison.json
    python benchmarks/precision_change.py OTHER_DIR REFERENCE_DIR > ...

OTHER_DIR holds point files (``<arm>_<point>.json``, as ``python -m pipeline.stages.sweep <arm> <point>`` writes
them) of a second run of the committed protocol, e.g. with ``runtime.precision: fp32`` where the committed run used
bf16; the committed run is ``metrics/data_hunger/`` unless REFERENCE_DIR names another (the second runs made before
issue 37's rerun are held against that run's files, kept in ``metrics/run_before_issue37/``). For every point both
runs have, it prints each arm's mean test accuracy in both runs, and for every paired comparison the README states
(``COMPARISONS``), the difference and its 95% t interval in each run, whether the verdict (ahead / level / behind)
is the same and whether the two intervals overlap. ``all_hold`` is true when every verdict is the same and every
pair of intervals overlaps: what a change of precision may move is the last bits, not a conclusion. ``grids`` names
the arms and sizes whose learning-rate grid differs between the runs (a second run made before a grid was widened).
``flipped`` counts the comparisons ahead in one run and behind in the other. ``learning_rates`` sets each trained
arm's chosen rate in one run beside the other's, at every size both hold, with each run's ``margin``: its choice's
mean validation score minus the runner-up's (a small margin is a choice that validation barely tells apart);
``same_learning_rate`` counts the cells whose rate is the same. Where the second run's seeds are
disjoint from the committed run's (a replication: ``seeds: [5, 6, 7, 8, 9]``, issue 37), each comparison also has
``pooled``: the paired difference over both runs' seeds together.

Where OTHER_DIR also holds the second run's ``pretraining_scale.json`` (a full run; point files kept in a
metrics tree's ``data_hunger`` folder, as the rerun's held against the run before it, have it in the folder
above), the pretraining-size axis's paired comparisons (``comparisons`` there: backbones against each other and
the pixel probe, the masked-patch backbone against its pool-only twin) are held against the reference's the same
way (``pretraining``); its ``evaluate.json`` and ``ablation.json`` give seed 000's two arms' and the collapse
study's mean test accuracy in both runs (``seed000``, ``ablation``).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from pipeline.results.stats import COMPARISONS, paired_difference

COMMITTED = Path("metrics/data_hunger")
METRICS = Path("metrics")
POINT_FILE = re.compile(r"^[a-z]+_\d+\.json$")


def read_points(folder: Path) -> dict[str, dict[str, dict]]:
    """``{size: {arm: point}}`` of the point files in ``folder``."""
    points: dict[str, dict[str, dict]] = {}
    for path in sorted(folder.glob("*_*.json")):
        if not POINT_FILE.match(path.name):  # a second run's stage files lie beside its point files
            continue
        point = json.loads(path.read_text())
        points.setdefault(str(point["n_train_per_class"]), {})[point["arm"]] = point
    return points


def interval(d: dict) -> dict:
    return {key: d[key] for key in ("mean", "low", "high", "verdict")}


def side_by_side(reference: dict, other: dict) -> dict:
    """One comparison in both runs: each interval, whether the verdicts agree and whether the intervals overlap."""
    runs = {"reference": interval(reference), "other": interval(other)}
    runs["same_verdict"] = runs["reference"]["verdict"] == runs["other"]["verdict"]
    runs["overlap"] = max(runs["reference"]["low"], runs["other"]["low"]) <= min(
        runs["reference"]["high"], runs["other"]["high"]
    )
    return runs


def shared_points(reference: dict[str, dict[str, dict]], other: dict[str, dict[str, dict]]):
    """``(size, arm, (reference point, other point))`` for every size and arm both runs hold, in order."""
    for n in sorted(set(reference) & set(other), key=int):
        for arm in sorted(set(reference[n]) & set(other[n])):
            yield n, arm, (reference[n][arm], other[n][arm])


def differing_grids(reference: dict[str, dict[str, dict]], other: dict[str, dict[str, dict]]) -> dict:
    """``{arm: {size: {"reference": lrs, "other": lrs}}}`` for each trained arm and size both runs hold whose
    learning-rate grid (the keys of the point's ``lr_trials``) differs: a verdict there compares grids as well."""
    grids: dict[str, dict] = {}
    for n, arm, points in shared_points(reference, other):
        lrs = [sorted(float(lr) for lr in point.get("lr_trials", {})) for point in points]
        if lrs[0] != lrs[1]:
            grids.setdefault(arm, {})[n] = {"reference": lrs[0], "other": lrs[1]}
    return grids


def margin(point: dict) -> float | None:
    """The chosen candidate's mean validation accuracy minus the best other candidate's (``lr_trials``)."""
    scores = sorted((trial["val_acc"] for trial in point.get("lr_trials", {}).values()), reverse=True)
    return scores[0] - scores[1] if len(scores) > 1 else None


def chosen_rates(reference: dict[str, dict[str, dict]], other: dict[str, dict[str, dict]]) -> dict:
    """``{arm: {size: {"reference", "other", "same", "margin"}}}`` for each arm and size both runs trained with a
    chosen learning rate (the probes choose a ridge penalty instead, per seed)."""
    rates: dict[str, dict] = {}
    for n, arm, points in shared_points(reference, other):
        if all("lr" in point for point in points):
            rates.setdefault(arm, {})[n] = {
                "reference": points[0]["lr"],
                "other": points[1]["lr"],
                "same": points[0]["lr"] == points[1]["lr"],
                "margin": {"reference": margin(points[0]), "other": margin(points[1])},
            }
    return rates


def compare_runs(reference: dict[str, dict[str, dict]], other: dict[str, dict[str, dict]]) -> dict:
    """Arm means and paired comparisons at every size and arm both runs hold."""
    arms, comparisons, runtimes = {}, {}, {"reference": set(), "other": set()}
    for n in sorted(set(reference) & set(other), key=int):
        shared = sorted(set(reference[n]) & set(other[n]))
        for arm in shared:
            runtimes["reference"].add(reference[n][arm]["runtime"])
            runtimes["other"].add(other[n][arm]["runtime"])
        arms[n] = {
            arm: {
                "reference": reference[n][arm]["test_acc"]["mean"],
                "other": other[n][arm]["test_acc"]["mean"],
                "change": other[n][arm]["test_acc"]["mean"] - reference[n][arm]["test_acc"]["mean"],
            }
            for arm in shared
        }
        comparisons[n] = {}
        for a, b in COMPARISONS:
            if a not in shared or b not in shared:
                continue
            differences = (paired_difference(run[n][a]["test_acc"]["per_seed"], run[n][b]["test_acc"]["per_seed"])
                           for run in (reference, other))  # fmt: skip
            comparisons[n][f"{a}-{b}"] = side_by_side(*differences)
            if fresh_seeds(reference[n][a], other[n][a]):  # a replication: both runs' seeds pooled, paired by seed
                pooled = [run[n][arm]["test_acc"]["per_seed"] for run in (reference, other) for arm in (a, b)]
                comparisons[n][f"{a}-{b}"]["pooled"] = interval(paired_difference(pooled[0] + pooled[2],
                                                                                  pooled[1] + pooled[3]))  # fmt: skip
    held = [c["same_verdict"] and c["overlap"] for by_pair in comparisons.values() for c in by_pair.values()]
    flipped = [c for by_pair in comparisons.values() for c in by_pair.values()
               if {c["reference"]["verdict"], c["other"]["verdict"]} == {"ahead", "behind"}]  # fmt: skip
    rates = chosen_rates(reference, other)
    return {
        "grids": differing_grids(reference, other),
        "learning_rates": rates,
        "same_learning_rate": f"{sum(c['same'] for by_size in rates.values() for c in by_size.values())} of "
        f"{sum(len(by_size) for by_size in rates.values())}",
        "runtime": {name: sorted(values) for name, values in runtimes.items()},
        "arms": arms,
        "comparisons": comparisons,
        "compared": len(held),
        "held": sum(held),
        "flipped": len(flipped),  # ahead in one run, behind in the other
        "all_hold": all(held) and bool(held),
    }


def fresh_seeds(reference: dict, other: dict) -> bool:
    """Whether two point files ran disjoint seeds (a replication, whose per-seed scores may be pooled) rather
    than the same seeds again (a rerun in another precision or on another CPU kind)."""
    return not set(reference["runs"]) & set(other["runs"])


def compare_verdicts(reference: dict[str, dict[str, dict]], other: dict[str, dict[str, dict]]) -> dict:
    """``{pair: {key: paired_difference}}`` of two runs, side by side where both have it: same verdict, overlap."""
    comparisons = {}
    for pair in sorted(set(reference) & set(other)):
        for key in sorted(set(reference[pair]) & set(other[pair])):
            comparisons.setdefault(pair, {})[key] = side_by_side(reference[pair][key], other[pair][key])
    held = [c["same_verdict"] and c["overlap"] for by_key in comparisons.values() for c in by_key.values()]
    return {"comparisons": comparisons, "compared": len(held), "held": sum(held)}


def mean_accuracies(reference: dict, other: dict) -> dict:
    """``{name: {reference, other, change}}`` of two ``{name: {"test_acc": {"mean": ...}}}`` mappings."""
    return {
        name: {
            "reference": reference[name]["test_acc"]["mean"],
            "other": other[name]["test_acc"]["mean"],
            "change": other[name]["test_acc"]["mean"] - reference[name]["test_acc"]["mean"],
        }
        for name in reference
        if name in other
    }


def compare_stages(folder: Path, reference: Path = METRICS) -> dict:
    """The pretraining axis, seed 000's arms and the collapse study, where ``folder`` holds the second run's files
    and ``reference`` the first's."""
    result = {}

    def both(name: str) -> tuple[dict, dict] | None:
        if not (folder / name).is_file():
            return None
        return json.loads((reference / name).read_text()), json.loads((folder / name).read_text())

    if runs := both("pretraining_scale.json"):
        result["pretraining"] = compare_verdicts(runs[0]["comparisons"], runs[1]["comparisons"])
    if runs := both("evaluate.json"):
        result["seed000"] = mean_accuracies(*({arm: run[arm] for arm in ("scratch", "linear")} for run in runs))
    if runs := both("ablation.json"):
        result["ablation"] = mean_accuracies(runs[0]["variants"], runs[1]["variants"])
    return result


def stage_folder(points: Path) -> Path:
    """Where a run's stage files lie: one level up from point files kept in a metrics tree's ``data_hunger``
    folder (``metrics/``, ``metrics/run_before_issue37/``), beside them in a second run's own folder."""
    return points.parent if points.name == "data_hunger" else points


def main(argv: list[str]) -> None:
    if len(argv) not in (1, 2):
        sys.exit(__doc__)
    reference = Path(argv[1]) if len(argv) == 2 else COMMITTED
    result = compare_runs(read_points(reference), read_points(Path(argv[0])))
    result |= compare_stages(stage_folder(Path(argv[0])), stage_folder(reference))
    result["reference_source"], result["other_source"] = str(reference), argv[0]
    json.dump(result, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1:])
