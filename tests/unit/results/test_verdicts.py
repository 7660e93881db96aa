"""pipeline.results.verdicts: readings grouped by verdict, the second runs' verdicts named, one row per
comparison, and the README's first screen."""

from __future__ import annotations

import json
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def test_readings_group_the_sizes_by_verdict():
    from pipeline.results.verdicts import readings

    d = {"mean": 0.05, "low": 0.01, "high": 0.09, "verdict": "ahead"}
    level = {"mean": 0.01, "low": -0.02, "high": 0.04, "verdict": "level"}
    line = readings({"curve": {"linear-scratch": {"10": d, "75": level, "25": d}}})
    assert line == (
        "- **pretrained ViT, frozen + linear head** against **ViT from scratch**: ahead at 10 (+0.050 "
        "[+0.010, +0.090]), 25 (+0.050 [+0.010, +0.090]); level at 75 (+0.010 [-0.020, +0.040]) per class."
    )


def test_readings_name_each_second_run_whose_verdict_differs():
    from pipeline.results.verdicts import readings

    ahead = {"mean": 0.05, "low": 0.01, "high": 0.09, "verdict": "ahead"}
    level = {"mean": 0.01, "low": -0.02, "high": 0.04, "verdict": "level"}

    def second_run(verdict: str, reference: dict = ahead) -> dict:
        return {
            "comparisons": {"10": {"linear-scratch": {"reference": reference, "other": level | {"verdict": verdict}}}}
        }

    line = readings(
        {"curve": {"linear-scratch": {"10": ahead, "25": level}}},
        {
            "the fp32 rerun": second_run("level"),
            "the Zen 4 rerun": second_run("ahead"),  # the same verdict
            "a short rerun": {"comparisons": {}},  # no such size
            "an old rerun": second_run("behind", reference=ahead | {"mean": 0.06}),  # compared with other results
        },
    )
    assert (
        "ahead at 10 (+0.050 [+0.010, +0.090]; *level* in the fp32 rerun); level at 25 (+0.010 [-0.020, +0.040])"
        in line
    )
    assert "Zen 4" not in line and "short" not in line and "old" not in line


def committed(name: str) -> dict:
    return json.loads((REPO / "metrics" / name).read_text())


def test_the_first_screen_counts_what_holds_and_what_is_unsettled_from_the_committed_files():
    from pipeline.results.verdicts import answer

    comparisons = committed("comparisons.json")
    second_runs = {"the fp32 rerun": committed("precision_change.json")}
    text = answer(committed("evaluate.json"), committed("data_hunger.json"), comparisons, second_runs)
    cells = [d for by_size in comparisons["curve"].values() for d in by_size.values()]
    kept = sum(d["holm"] != "level" for d in cells)
    label = "What holds" if "**What holds**" in text else "What survives Holm, not yet replicated"
    held, unsettled = (int(re.search(rf"\*\*{word}\*\* \((\d+)", text)[1]) for word in (label, "Unsettled"))
    assert held <= kept and held + unsettled == sum(d["verdict"] != "level" for d in cells)
    assert f"{committed('evaluate.json')['scratch']['test_acc']['mean']:.3f}" in text.splitlines()[0]


def test_a_verdict_holm_drops_or_a_second_run_moves_is_unsettled_not_held():
    from pipeline.results.verdicts import answer, verdict_table

    base = {"mean": 0.05, "low": 0.01, "high": 0.09, "verdict": "ahead", "per_seed": [0.05] * 5}
    comparisons = {"curve": {"cnn-scratch": {"10": base | {"holm": "ahead"}, "25": base | {"holm": "level"},
                                             "75": base | {"holm": "ahead"}},
                             "linear-scratch": {"75": base | {"holm": "ahead", "holm_primary": "ahead"}},
                             "finetune-scratch": {"75": base | {"holm": "ahead"}}}}  # fmt: skip
    shown = {"mean": 0.05, "low": 0.01, "high": 0.09}  # what a second run held against these results saw
    agrees = {"reference": shown, "other": {"verdict": "ahead"}}
    moved = {"comparisons": {"75": {"cnn-scratch": {"reference": shown, "other": {"verdict": "level"}},
                                    "linear-scratch": agrees, "finetune-scratch": agrees},
                             "10": {"cnn-scratch": agrees}}}  # fmt: skip
    evaluate = {"scratch": {"test_acc": {"mean": 0.333}, "collapse": 1.0},
                "linear": {"test_acc": {"mean": 0.5, "std": 0.01}}, "n_test": 30, "baselines": {"chance": 1 / 3},
                "protocol": {"n_train_per_class": 75}}  # fmt: skip
    curve = {"scratch": {"10": {"mean": 0.4}, "75": {"mean": 0.6}}}
    text = answer(evaluate, curve, comparisons, {"the rerun": moved})
    assert "**What holds** (3 of 5" in text and "small ResNet from scratch ahead of ViT from scratch at 10;" in text
    assert "a second run agrees (the rerun)" in text and "not yet replicated" not in text
    assert "**Unsettled** (2 more" in text and "ViT from scratch at 25, 75 per class" in text
    del moved["comparisons"]["10"]  # a second run without that row: it survives Holm but is not yet replicated
    text = answer(evaluate, curve, comparisons, {"the rerun": moved})
    assert "**What holds** (2 of 5" in text
    assert "**Survives Holm, not yet replicated** (1 more: no second run has these yet): small ResNet from scratch " \
           "ahead of ViT from scratch at 10 per class." in text  # fmt: skip
    rows = verdict_table(comparisons, {"the rerun": moved}).splitlines()
    assert rows[2].endswith("| 10 | +0.050 | [+0.010, +0.090] | ahead | ahead |  | not tested yet |")  # not in it
    assert rows[3].endswith("| 25 | +0.050 | [+0.010, +0.090] | ahead | level |  | not tested yet |")
    assert rows[4].endswith("| 75 | +0.050 | [+0.010, +0.090] | ahead | ahead |  | *level* in the rerun |")
    assert rows[5].endswith("| 75 | +0.050 | [+0.010, +0.090] | ahead | ahead | ahead | same |")  # a primary one
    assert (
        "**The primary comparisons** (1, named in params.yaml before the rerun that is to test them; Holm over "
        "these 1 alone): pretrained ViT, frozen + linear head - ViT from scratch at 75: +0.050 [+0.010, +0.090], "
        "ahead, ahead after Holm (per class)."
    ) in text


def test_while_no_second_run_tests_the_shown_results_nothing_is_said_to_hold():
    from pipeline.results.verdicts import answer, testing_runs, verdict_table

    base = {"mean": 0.05, "low": 0.01, "high": 0.09, "verdict": "ahead", "per_seed": [0.05] * 5}
    comparisons = {"curve": {"cnn-scratch": {"10": base | {"holm": "ahead"}, "25": base | {"holm": "level"}}}}
    older = {"comparisons": {"10": {"cnn-scratch": {"reference": {"mean": 0.07}, "other": {"verdict": "level"}}}}}
    evaluate = {"scratch": {"test_acc": {"mean": 0.333}, "collapse": 1.0},
                "linear": {"test_acc": {"mean": 0.5, "std": 0.01}}, "n_test": 30, "baselines": {"chance": 1 / 3},
                "protocol": {"n_train_per_class": 10}}  # fmt: skip
    comparisons["curve"]["linear-scratch"] = {"10": base | {"holm": "ahead"}}
    comparisons["curve"]["finetune-scratch"] = {"10": base | {"holm": "ahead"}}
    curve = {"scratch": {"10": {"mean": 0.4}, "75": {"mean": 0.6}}}
    assert testing_runs(comparisons, {"the run before": older}) == []
    text = answer(evaluate, curve, comparisons, {"the run before": older})
    assert "What holds" not in text
    assert "**What survives Holm, not yet replicated** (3 of 4 comparisons" in text
    assert "**Unsettled** (1 more are nominally ahead or behind, but fail Holm):" in text
    shown = {"mean": 0.05, "low": 0.01, "high": 0.09}
    same = {"comparisons": {"10": {"cnn-scratch": {"reference": shown, "other": {"verdict": "ahead"}}}}}
    assert testing_runs(comparisons, {"the run before": older, "the replication": same}) == ["the replication"]
    # the same mean by coincidence, its seeds moved (a rerun that left one arm's mean as it was): not this row
    coincidence = {"comparisons": {"10": {"cnn-scratch": {"reference": shown | {"low": 0.02}, "other": {}}}}}
    assert testing_runs(comparisons, {"the run before": coincidence}) == []
    rows = verdict_table(comparisons, {"the run before": older}).splitlines()
    assert rows[2].endswith("| ahead | ahead |  | not tested yet |")
    rows = verdict_table(comparisons, {"the run before": older, "the replication": same}).splitlines()
    assert rows[2].endswith("| ahead | ahead |  | same |")
    assert rows[3].endswith("| level |  | not tested yet |")  # cnn-scratch at 25: no second run has that row
