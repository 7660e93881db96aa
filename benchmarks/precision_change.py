"""Do the curve's readings survive a second run in another precision (or on another CPU kind)?

    python benchmarks/precision_change.py OTHER_DIR > metrics/precision_change.json

OTHER_DIR holds point files (``<arm>_<point>.json``, as ``python -m pipeline.stages.sweep <arm> <point>`` writes
them) of a second run of the committed protocol, e.g. with ``runtime.precision: fp32`` where the committed run
used bf16; the committed run is ``metrics/data_hunger/``. For every point both runs have, it prints each arm's
mean test accuracy in both runs, and for every paired comparison the README states (``COMPARISONS``), the
difference and its 95% t interval in each run, whether the verdict (ahead / level / behind) is the same and
whether the two intervals overlap. ``all_hold`` is true when every verdict is the same and every pair of
intervals overlaps: what a change of precision may move is the last bits, not a conclusion.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pipeline.stats import COMPARISONS, paired_difference

COMMITTED = Path("metrics/data_hunger")


def read_points(folder: Path) -> dict[str, dict[str, dict]]:
    """``{size: {arm: point}}`` of the point files in ``folder``."""
    points: dict[str, dict[str, dict]] = {}
    for path in sorted(folder.glob("*_*.json")):
        point = json.loads(path.read_text())
        points.setdefault(str(point["n_train_per_class"]), {})[point["arm"]] = point
    return points


def interval(d: dict) -> dict:
    return {key: d[key] for key in ("mean", "low", "high", "verdict")}


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
            runs = {
                name: interval(paired_difference(run[n][a]["test_acc"]["per_seed"], run[n][b]["test_acc"]["per_seed"]))
                for name, run in (("reference", reference), ("other", other))
            }
            runs["same_verdict"] = runs["reference"]["verdict"] == runs["other"]["verdict"]
            runs["overlap"] = max(runs["reference"]["low"], runs["other"]["low"]) <= min(
                runs["reference"]["high"], runs["other"]["high"]
            )
            comparisons[n][f"{a}-{b}"] = runs
    held = [c["same_verdict"] and c["overlap"] for by_pair in comparisons.values() for c in by_pair.values()]
    return {
        "runtime": {name: sorted(values) for name, values in runtimes.items()},
        "arms": arms,
        "comparisons": comparisons,
        "compared": len(held),
        "held": sum(held),
        "all_hold": all(held) and bool(held),
    }


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        sys.exit(__doc__)
    result = compare_runs(read_points(COMMITTED), read_points(Path(argv[0])))
    result["reference_source"], result["other_source"] = str(COMMITTED), argv[0]
    json.dump(result, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1:])
