"""How far the headline numbers move between two committed runs, e.g. bf16 on one CPU kind and fp32 on another.

    python benchmarks/precision_change.py OLD_REV [NEW_REV] > metrics/precision_change.json

Reads metrics/evaluate.json, backbone.json, data_hunger.json and ablation.json at both git revisions (NEW_REV
defaults to the work tree) and prints, per headline number, both values and the difference (new - old), with
each run's runtime record, so the README can quote the change from a committed file.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def read(rev: str | None, path: str) -> dict:
    if rev is None:
        return json.loads(Path(path).read_text())
    return json.loads(subprocess.run(["git", "show", f"{rev}:{path}"], capture_output=True, check=True).stdout)


def headline(rev: str | None) -> tuple[dict[str, float], str]:
    evaluate, backbone = read(rev, "metrics/evaluate.json"), read(rev, "metrics/backbone.json")
    curve, ablation = read(rev, "metrics/data_hunger.json"), read(rev, "metrics/ablation.json")
    numbers = {
        "evaluate.scratch.test_acc": evaluate["scratch"]["test_acc"]["mean"],
        "evaluate.pretrained.test_acc": evaluate["pretrained"]["test_acc"]["mean"],
        "evaluate.baselines.pixels_logreg": evaluate["baselines"]["pixels_logreg"],
        "backbone.pool_test_acc": backbone["pool_test_acc"],
    }
    for arm in ("scratch", "cnn", "linear", "finetune"):
        for n, value in curve[arm].items():
            numbers[f"data_hunger.{arm}.{n}"] = value["mean"]
    for variant, value in ablation["variants"].items():
        numbers[f"ablation.{variant}.test_acc"] = value["test_acc"]["mean"]
    return numbers, evaluate.get("runtime", "")


def main(argv: list[str]) -> None:
    old_rev, new_rev = argv[0], argv[1] if len(argv) > 1 else None
    old, old_runtime = headline(old_rev)
    new, new_runtime = headline(new_rev)
    changes = {key: {"old": old[key], "new": new[key], "change": new[key] - old[key]} for key in old if key in new}
    largest = max(changes, key=lambda key: abs(changes[key]["change"]))
    summary = {
        "old": {"rev": old_rev, "runtime": old_runtime},
        "new": {"rev": new_rev or "work tree", "runtime": new_runtime},
        "numbers": changes,
        "largest_change": {"number": largest, **changes[largest]},
        "mean_abs_change": sum(abs(c["change"]) for c in changes.values()) / len(changes),
    }
    json.dump(summary, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1:])
