"""pipeline.results.report_tables: the generated tables from metrics contents: both arms and baselines, a row per size
with the best bolded, the ablation in its order, readings grouped by verdict and the second runs' verdicts."""

import json
from pathlib import Path

from pipeline.results import report_tables
from pipeline.results.report_tables import ablation_table, curve_table, results_table

REPO = Path(__file__).resolve().parents[3]


def test_results_table_shows_both_arms_and_baselines_from_the_committed_metrics():
    metrics = json.loads((REPO / "metrics/evaluate.json").read_text())
    table = results_table(metrics)
    scratch = metrics["scratch"]["test_acc"]
    assert f"**{scratch['mean']:.3f} ± {scratch['std']:.3f}**" in table
    assert f"| {metrics['baselines']['pixels_logreg']:.3f} |" in table
    assert table.count("\n| ") == 1 + 2 + 5 + 3  # header, seed 000's two arms, five protocol arms, three baselines
    fine = metrics["protocol"]["finetune"]
    assert f"**{fine['mean']:.3f} ± {fine['std']:.3f}**" in table


def test_curve_table_has_a_row_per_size_and_bolds_the_best_arm():
    def point(mean):
        return {"mean": mean, "std": 0.01, "per_seed": [mean]}

    curve = {
        "scratch": {"10": point(0.4), "100": point(0.7)},
        "cnn": {"10": point(0.5), "100": point(0.6)},
        "baselines": {"10": {"pixels_logreg": 0.55}, "100": {}},
    }
    table = curve_table(curve)
    rows = table.splitlines()
    assert rows[0] == "| per class | ViT from scratch | small ResNet from scratch | logistic regression on pixels |"
    assert rows[2] == "| 10 | 0.400 ± 0.010 | **0.500 ± 0.010** | 0.550 |"
    assert rows[3] == "| 100 | **0.700 ± 0.010** | 0.600 ± 0.010 | (not fit) |"


def test_ablation_table_keeps_the_variant_order_and_shows_the_weights_shrinking():
    def spread(mean):
        return {"mean": mean, "std": 0.0, "per_seed": [mean, mean]}

    result = {"test_acc": spread(0.5), "collapse": spread(0.4), "train_loss": spread(0.9),
              "weight_rms_initial": spread(0.06), "weight_rms": spread(0.0008),
              "attention0_rms_initial": spread(0.0624), "attention0_rms": spread(0.00079)}  # fmt: skip
    ablation = {"order": ["adamw", "adam_l2"], "variants": {"adam_l2": result, "adamw": result}}
    rows = ablation_table(ablation).splitlines()
    assert rows[2].startswith("| `adamw` | AdamW, decay 0.3 decoupled") and "**0.500 ± 0.000**" in rows[2]
    assert rows[3].startswith("| `adam_l2` | Adam, decay 0.3 added to the gradient")
    assert rows[3].endswith("| 0.0600 -> 0.00080 | 0.0624 -> 0.00079 |")


def test_precision_table_adds_the_pretraining_axis_and_the_means_of_a_full_second_run():
    from pipeline.results.report_tables import precision_table

    def side(verdict_a, verdict_b):
        one = {"mean": 0.05, "low": 0.01, "high": 0.09, "verdict": verdict_a}
        two = {"mean": 0.02, "low": -0.01, "high": 0.05, "verdict": verdict_b}
        return {"reference": one, "other": two, "same_verdict": verdict_a == verdict_b, "overlap": True}

    change = {
        "runtime": {"reference": ["cpu bf16"], "other": ["cpu fp32 (a)", "cpu fp32 (b)"]},
        "held": 1, "compared": 1, "comparisons": {"10": {"cnn-scratch": side("ahead", "ahead")}},
        "pretraining": {"held": 0, "compared": 1, "comparisons": {"resnet-vit": {"7000/25": side("ahead", "level")}}},
        "seed000": {"scratch": {"reference": 0.3333, "other": 0.3333}, "linear": {"reference": 0.546, "other": 0.55}},
    }  # fmt: skip
    text = precision_table(change)
    assert text.startswith("Committed run: cpu bf16. Second run: cpu fp32 (a) and cpu fp32 (b). 1 of 1 comparisons")
    assert "| small ResNet from scratch - ViT from scratch | 10 | +0.050 [+0.010, +0.090] ahead | " in text
    assert "The pretraining-size axis: 0 of 1 comparisons keep their verdict with overlapping intervals." in text
    assert ("| small ResNet - ViT | 7,000 / 25 | +0.050 [+0.010, +0.090] ahead | +0.020 [-0.010, +0.050] level | NO "
            "| yes |") in text  # fmt: skip
    assert text.endswith("pretrained ViT, frozen + linear head 0.546 -> 0.550.")


def test_replication_table_puts_the_pooled_ten_seed_interval_beside_both_runs_and_counts_moves_and_flips():
    from pipeline.results.report_tables import replication_table

    def d(mean, verdict):
        return {"mean": mean, "low": mean - 0.02, "high": mean + 0.02, "verdict": verdict}

    change = {
        "runtime": {"reference": ["cpu bf16"], "other": ["cpu fp32", "cpu bf16"]}, "held": 1, "compared": 2,
        "flipped": 1, "same_learning_rate": "1 of 2",
        "comparisons": {
            "75": {"cnn-scratch": {"reference": d(0.05, "ahead"), "other": d(0.04, "ahead"),
                                   "same_verdict": True, "overlap": True, "pooled": d(0.045, "ahead")}},
            "10": {"linear-pixels": {"reference": d(0.05, "ahead"), "other": d(-0.05, "behind"),
                                     "same_verdict": False, "overlap": False, "pooled": d(0.0, "level")}},
        },
    }  # fmt: skip
    named = replication_table(change, reference_name="the rerun (loss rule)").splitlines()
    assert named[0].startswith("The rerun (loss rule): cpu bf16. Replication: cpu fp32 and cpu bf16.")
    assert named[2].startswith("| A - B | per class | the rerun (loss rule) | replication (fresh seeds) |")
    rows = replication_table(change).splitlines()
    assert rows[0] == (
        "Committed run: cpu bf16. Replication: cpu fp32 and cpu bf16. 1 of 2 comparisons keep their verdict with "
        "overlapping intervals; 1 do not, 1 of them flipping between ahead and behind. The learning rate chosen is "
        "the same in 1 of 2 arm-by-size cells."
    )
    assert rows[4] == (
        "| pretrained ViT, frozen + linear head - few-shot probe on raw pixels | 10 | +0.050 [+0.030, +0.070] ahead | "
        "-0.050 [-0.070, -0.030] behind | NO | NO | +0.000 [-0.020, +0.020] level |"
    )  # sizes in order: 10 before 75
    assert rows[5].startswith("| small ResNet from scratch - ViT from scratch | 75 |")
    assert rows[5].endswith("| yes | yes | +0.045 [+0.025, +0.065] ahead |")


def test_differing_grids_are_listed_once_per_grid_with_their_sizes():
    """The precision table names each arm's grids once, with the sizes where they differ, in size order."""
    old, new = {"reference": [0.001, 0.003, 0.01], "other": [0.001, 0.003]}, {"reference": [0.1], "other": [0.2]}
    grouped = report_tables.grouped_by_value({"250": old, "10": old, "1000": new})
    assert grouped == [(old, ["10", "250"]), (new, ["1000"])]
    change = json.loads((REPO / "metrics" / "precision_change.json").read_text())
    table = report_tables.precision_table(change | {"grids": {"cnn": {"10": old, "75": old}}})
    assert "small ResNet from scratch at 10, 75 per class: 0.001, 0.003, 0.01 in the committed run" in table
    assert "Learning-rate grids" not in report_tables.precision_table(change | {"grids": {}})


def test_the_slopes_reading_names_figure_4s_direction_its_opposite_and_the_level_shots():
    from pipeline.results.report_tables import slopes_reading

    def d(mean, verdict):
        return {"mean": mean, "low": mean - 0.01, "high": mean + 0.01, "verdict": verdict}

    scale = {"slopes": {"vit-resnet": {"5": d(0.05, "ahead"), "10": d(0.0, "level"), "25": d(-0.04, "behind")}}}
    assert slopes_reading(scale) == (
        "Against Figure 4: the ViT gains more per decade than the small ResNet, Figure 4's direction, at 5 shots "
        "(+0.050 [+0.040, +0.060]); the ViT gains less per decade than the small ResNet, the opposite of Figure 4's "
        "direction, at 25 shots (-0.040 [-0.050, -0.030]); the two slopes are level at 10 shots."
    )


def test_the_synthetic_table_shows_each_backbone_run_so_far_and_the_hypotheses_only_once_tested():
    from pipeline.results.report_tables import synthetic_table

    acc = {"mean": 0.5, "std": 0.01}
    pretrained = [
        {"arch": arch, "n_pretrain": 10000, "few_shot": {"5": acc, "10": acc}, "held_out_acc": 0.9, "best_step": 400,
         "used": arch == "vit", "runtime": "cpu fp32 (AVX2, no native bf16)" if arch == "vit" else "cpu bf16"}
        for arch in ("resnet", "vit")
    ]  # fmt: skip
    finetuned = [{"arch": "vit", "n_pretrain": 10000, "finetune": {"10": {"test_acc": acc}, "75": {"test_acc": acc}}}]
    partial = synthetic_table(pretrained, finetuned, None, 6)
    assert partial.startswith("2 of 6 backbones pretrained, 1 fine-tuned")
    rows = [line for line in partial.splitlines() if line.startswith("| ViT") or line.startswith("| small ResNet")]
    assert rows[0].startswith("| ViT | 10,000 | cpu fp32, AVX2 |") and "not yet" not in rows[0]  # the ViT first
    assert rows[1].startswith("| small ResNet | 10,000 | cpu bf16 |")  # each backbone's machine kind and precision
    assert "(400, not used)" in rows[1] and rows[1].endswith("| not yet | not yet |")
    assert "MET" not in partial and "tested once every backbone has run" in partial
    difference = {"mean": 0.02, "low": -0.01, "high": 0.05}
    slope = difference | {"verdict": "level"}
    study = {"hypotheses": {"H1": {"rule": "slope", "difference": difference, "met": False, "met_under_holm": False}},
             "primary_shots": 10, "slopes": {key: {"5": slope, "10": slope} for key in ("vit", "resnet", "vit-resnet")},
             "finetune_against_cnn": {"vit": {"10000": {"10": slope, "75": slope}}, "resnet": {}}}  # fmt: skip
    tested = synthetic_table(pretrained, finetuned, study, 6)
    assert "| H1 | slope | +0.020 [-0.010, +0.050] | NOT MET | NOT MET |" in tested
    assert "| ViT - small ResNet | +0.020 [-0.010, +0.050] level | +0.020 [-0.010, +0.050] level |" in tested
    assert "| ViT | 10,000 | +0.020 [-0.010, +0.050] level | +0.020 [-0.010, +0.050] level |" in tested


def test_the_readme_line_on_the_synthetic_study_gives_each_verdict_only_once_the_study_has_run():
    from pipeline.results.report_tables import synthetic_answer

    sizes = [10000, 100000, 1000000]
    assert "2 of 6 backbones have run" in synthetic_answer(None, 2, 6, sizes) and "MET" not in synthetic_answer(
        None, 2, 6, sizes
    )
    hypothesis = {"rule": "the slope: MET if the paired 95% interval is above 0", "met": True,
                  "difference": {"mean": 0.05, "low": 0.01, "high": 0.09}}  # fmt: skip
    slope = {"mean": 0.01, "low": -0.02, "high": 0.04}
    slopes = {"vit": {"10": slope}, "resnet": {"10": slope}}
    study = {"hypotheses": {"H1": hypothesis}, "primary_shots": 10, "slopes": slopes}
    line = synthetic_answer(study, 6, 6, sizes)
    assert "moved the ViT's 10-shot probe by +0.010 [-0.020, +0.040] per decade" in line
    assert "10,000 to 1,000,000 fractal images" in line and "H1, the slope: +0.050 [+0.010, +0.090], MET" in line


def test_cross_kind_table_sets_each_cells_learning_rate_and_margin_beside_the_standard_error():
    """The margins are validation accuracies' differences in points; the standard error is one accuracy's at its
    largest (p = 0.5) on the validation images. Cells go in the tables' arm order, then by size."""

    def d(mean, verdict):
        return {"mean": mean, "low": mean - 0.02, "high": mean + 0.02, "verdict": verdict}

    change = {
        "runtime": {"reference": ["cpu bf16 (AVX512)"], "other": ["cpu fp32 (AVX2, no native bf16)"]},
        "same_learning_rate": "1 of 2", "held": 1, "compared": 1, "flipped": 0,
        "learning_rates": {
            "cnn": {"10": {"reference": 0.03, "other": 0.01, "same": False,
                           "margin": {"reference": 0.004, "other": 0.0113}}},
            "scratch": {"25": {"reference": 0.001, "other": 0.001, "same": True,
                               "margin": {"reference": 0.02, "other": 0.015}}},
        },
        "comparisons": {"10": {"cnn-scratch": {"reference": d(0.06, "ahead"), "other": d(0.05, "ahead"),
                                               "same_verdict": True, "overlap": True}}},
    }  # fmt: skip
    rows = report_tables.cross_kind_table(change, n_val=1500).splitlines()
    assert rows[0].startswith("Committed run: cpu bf16 (AVX512). This run: cpu fp32 (AVX2, no native bf16). The "
                              "learning rate chosen is the same in 1 of 2 cells; 1 of 1 comparisons")  # fmt: skip
    assert "at most 1.3 points" in rows[2] and "1,500 images" in rows[2]
    assert rows[6:8] == ["| ViT from scratch | 25 | 0.001 (2.00) | 0.001 (1.50) | yes |",
                         "| small ResNet from scratch | 10 | 0.03 (0.40) | 0.01 (1.13) | NO |"]  # fmt: skip
    assert rows[-1].startswith("| small ResNet from scratch - ViT from scratch | 10 | +0.060 [+0.040, +0.080] ahead")
    without = report_tables.cross_kind_table(change | {"compared": 0, "held": 0, "comparisons": {}}, 1500)
    assert "| A - B |" not in without
    # a second run that is not a rerun of the committed one names both runs in the sentence and the headers
    named = report_tables.cross_kind_table(change, 1500, names=("the loss rule's run", "the accuracy rule's run"))
    named = named.splitlines()
    assert named[0].startswith("The loss rule's run: cpu bf16 (AVX512). The accuracy rule's run: cpu fp32")
    assert (
        named[4]
        == "| arm | per class | the loss rule's run: lr (margin) | the accuracy rule's run: lr (margin) | same lr |"
    )
    assert named[-3].startswith("| A - B | per class | the loss rule's run | the accuracy rule's run |")


def test_floor_rule_table_sets_both_rules_side_by_side_with_the_pre_registered_verdict():
    def rule(lr, acc, steps, at_floor):
        return {"lr": lr, "val_acc": acc, "steps": steps, "at_floor": at_floor}

    check = {
        "runtime": "cpu fp32 (AVX2, no native bf16)", "passed": 1, "of": 1, "verdict": "incomplete",
        "cells": [{"arm": "scratch", "n_train_per_class": 10, "allowance": 0.0258, "passes": True,
                   "committed": rule(0.001, 0.4984, [230, 230, 230], 3),
                   "candidate": rule(0.0003, 0.51, [410, 380, 520], 0)}],
        "unchecked": [{"arm": "finetune", "n_train_per_class": 25, "why": "not among --arms"}],
    }  # fmt: skip
    rows = report_tables.floor_rule_table(check).splitlines()
    assert rows[0].endswith("The candidate passes in 1 of 1 cells checked: **incomplete**.")
    assert rows[4] == ("| ViT from scratch | 10 | 0.001, 0.498, 230, 230, 230, 3 of 3 | 0.0003, 0.510, 410, 380, 520, "
                       "0 of 3 | 0.026 | yes |")  # fmt: skip
    assert rows[5].startswith("| pretrained ViT, probe then fine-tune | 25 | not checked: not among --arms")


def test_cross_kind_answer_counts_each_arms_same_rates_and_spans_the_margins_where_a_rate_moved():
    def cell(same, reference, other):
        return {"same": same, "margin": {"reference": reference, "other": other}}

    change = {"same_learning_rate": "2 of 3", "learning_rates": {
        "cnn": {"10": cell(False, 0.0004, 0.0002)},
        "scratch": {"10": cell(True, 0.0122, 0.0009), "25": cell(True, 0.0016, 0.0202)},
    }}  # fmt: skip
    assert report_tables.cross_kind_answer(change, n_val=1500) == (
        "They chose the same learning rate in 2 of 3 cells (ViT from scratch in 2 of 2, small ResNet from scratch in 0 "
        "of 1); where the rate moved, the two runs' margins (the choice's mean validation accuracy over the "
        "runner-up's) were 0.02 to 0.04 points, against a standard error of one accuracy of at most 1.3."
    )
    change["learning_rates"]["cnn"]["10"]["same"] = True
    assert report_tables.cross_kind_answer(change | {"same_learning_rate": "3 of 3"}, 1500).endswith(
        "small ResNet from scratch in 1 of 1)."
    )
    verdicts = {"compared": 12, "held": 11, "flipped": 0}
    assert report_tables.cross_kind_answer(change | verdicts, 1500).endswith(
        "small ResNet from scratch in 1 of 1). Of the 12 verdicts both runs hold, 11 kept theirs with overlapping "
        "intervals and 0 flipped between ahead and behind."
    )


def test_replication_answer_says_whether_the_target_is_met_and_names_each_verdict_that_moved():
    def side(verdict_a, verdict_b, overlap=True):
        one = {"mean": 0.05, "low": 0.01, "high": 0.09, "verdict": verdict_a}
        two = {"mean": 0.02, "low": -0.01, "high": 0.05, "verdict": verdict_b}
        return {"reference": one, "other": two, "same_verdict": verdict_a == verdict_b, "overlap": overlap}

    rows = {str(n): {"cnn-scratch": side("ahead", "ahead")} for n in range(1, 10)}
    change = {"held": 9, "compared": 10, "flipped": 0, "same_learning_rate": "4 of 5",
              "comparisons": rows | {"75": {"linear-pixels": side("behind", "level")}}}  # fmt: skip
    assert report_tables.replication_answer(change) == (
        "It kept 9 of 10 of the curve's verdicts with overlapping intervals, 0 flipping between ahead and behind: "
        "issue 37's target (at least 90% held, none flipped) is met. Moved (1, per class): pretrained ViT, frozen + "
        "linear head - few-shot probe on raw pixels at 75: behind -> level. The learning rate chosen is the same in "
        "4 of 5 arm-by-size cells."
    )
    change["comparisons"]["75"]["cnn-pixels"] = side("ahead", "ahead", overlap=False)
    change |= {"held": 8, "compared": 11}
    text = report_tables.replication_answer(change)
    assert "is NOT met. Moved (2, per class): pretrained ViT, frozen + linear head - " in text
    assert "; small ResNet from scratch - few-shot probe on raw pixels at 75: ahead -> ahead, intervals apart. " in text
    assert "(at least 90% held, none flipped) is met" in report_tables.replication_answer(
        {"held": 9, "compared": 10, "flipped": 0, "same_learning_rate": "5 of 5", "comparisons": rows}
    )
    flipped = {"held": 10, "compared": 10, "flipped": 1, "same_learning_rate": "5 of 5", "comparisons": rows}
    assert "is NOT met" in report_tables.replication_answer(flipped)
