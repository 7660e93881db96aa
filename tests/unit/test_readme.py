"""Every number the README reports comes from a committed file, by the key it comes from: results appear only
inside the generated tables (tests/tools/test_report.py regenerates them from metrics/ and fails on any
difference), and the prose around them may quote settings of params.yaml, and a few measured results by hand
(the repro's minutes, the step probe), each checked against the key it comes from."""

from __future__ import annotations

import json
import re
from pathlib import Path
from statistics import median

import yaml

REPO = Path(__file__).resolve().parents[2]
NUMBER = re.compile(r"(?<![\d.])0\.\d{3}(?![\d])")
DOCUMENTS = ("README.md", "docs/results.md", "docs/reproducibility.md")
DECIMAL = re.compile(r"(?<![\w.])\d+\.\d+(?:e-?\d+)?(?![\d.])")


def committed(name: str) -> dict:
    return json.loads((REPO / "metrics" / name).read_text())


def repro(run: str) -> dict:
    return committed("repro_time.json")["runs"][run]


def earlier(commit: str) -> dict:
    """A full run of an earlier protocol, by the commit it ran."""
    (run,) = [run for run in committed("repro_time.json")["earlier"] if run["commit"].startswith(commit)]
    return run


def cosine() -> dict:
    """The full run before the committed one on the same machine kind (its protocol's cosine schedule)."""
    return earlier("5d360f8")


def round4() -> dict:
    """The full run of issue 11's protocol, fp32 on a 2-core AVX2 EPYC."""
    return earlier("round 4")


def partial_run() -> dict:
    """The second run of the precision check on the Zen 4: not a full run, so outside ``runs``."""
    return next(run for run in committed("repro_time.json")["partial_runs"] if "AMD EPYC" in run["machine"])


AS_RUN_QUARTER = "as run: check at 0.25 of the budget, z 3"
AS_RUN_HALF = "as run: check at 0.5 of the budget, z 3"


def pilot(name: str, setting: str | None = None, key: str = "saved_share"):
    """metrics/pruning_pilot/<name>.json, or one setting's ``key`` in its summary."""
    summary = committed(f"pruning_pilot/{name}.json")["summary"]
    return summary if setting is None else summary[setting][key]


def changing_rules() -> list[dict]:
    """The rules of the adopted run's pilot that change a choice: every one but the two the prose names."""
    rules = [v for k, v in pilot("adopted_rule").items() if k not in ("kept_share", AS_RUN_QUARTER, AS_RUN_HALF)]
    assert all(r["choices_changed"] > 0 for r in rules)  # the prose says each changes a choice
    assert all(pilot("adopted_rule", k, "choices_changed") == 0 for k in (AS_RUN_QUARTER, AS_RUN_HALF))
    assert pilot("loss_rule_cross_kind", AS_RUN_QUARTER, "choices_changed") == 0
    return rules


def partial_run_for(purpose: str) -> dict:
    """The partial run in metrics/repro_time.json whose ``purpose`` is ``purpose``."""
    return next(run for run in committed("repro_time.json")["partial_runs"] if run.get("purpose") == purpose)


def issue21_same_kind() -> dict:
    """Issue 21's protocol run again in bf16 on the Zen 4 that ran the committed run's cross-kind check."""
    return partial_run_for("issue21_same_kind")


def same_kind(key: str) -> float:
    return issue21_same_kind()["same_cpu_kind_committed_parts"][key]


def smallest_sweeps_same_kind() -> list[float]:
    """The trained arms' sweeps at 10 per class: issue 37's seconds over issue 21's on the Zen 4."""
    per_item = same_kind("per_item")
    return [ratio for item, ratio in per_item.items() if item.endswith("@0") and not item.startswith("sweep_pixels")]


def accounting_ratio(count: str) -> float:
    """The whole curve's count in the committed point files over issue 21's (benchmarks/compute_accounting.py)."""
    return committed("compute_accounting.json")["totals"]["ratio"][count]


def compute_rule(key: str):
    """The compute rule's full run so far against issue 21's on the same CPU kind (metrics/repro_time.json)."""
    return partial_run_for("issue37_compute_rule")["same_cpu_kind_issue21"][key]


def halving(folder: str, *keys: str):
    """A total of benchmarks/halving_replay.py's replay of ``folder``'s point files."""
    value = committed("halving_replay.json")[f"metrics/{folder}"]["totals"]
    for key in keys:
        value = value[key]
    return value


def floor_and_cross_kind() -> dict:
    """Stage seconds of issue 37's floor check and cross-kind rerun, fp32 on a 2-core AVX2 EPYC."""
    return partial_run_for("issue37_floor_and_cross_kind")["stage_seconds"]


def grid_rerun() -> dict:
    """This round's rerun of the two arms whose learning-rate grids were widened."""
    return partial_run_for("grid_rerun")


def zen4_grid_rerun() -> dict:
    """The Zen 4 second run's small ResNet and transfer arms, rerun with the widened grids."""
    return partial_run_for("zen4_grid_rerun")


def stretch_run() -> dict:
    """Issue 21's pre-registered stretch stage and the stages that gather it."""
    return partial_run_for("stretch")


def issue37_rerun() -> dict:
    return partial_run_for("issue37_rerun")


def adopted_run() -> dict:
    return partial_run_for("issue37_adopted_rule")


def adopted_minutes(pauses: bool = True) -> float:
    """The accuracy rule's run's stage minutes, with or without the pauses (SIGSTOP for test runs) they include."""
    run = adopted_run()
    return (sum(run["stage_seconds"].values()) - (0 if pauses else sum(run["paused_seconds"].values()))) / 60


def adopted_sweep_ratios() -> list[float]:
    """Each trained sweep's time under the accuracy rule over the loss rule's, on the same machine kind."""
    return [r for stage, r in adopted_run()["same_cpu_kind_loss_rule"].items() if stage.startswith("sweep_")]


def replication_final_ratios() -> list[float]:
    """The accuracy rule's replication's backbone-reading stages over the loss rule's rerun's, both bf16 on a Zen 4."""
    return list(partial_run_for("issue37_replication_accuracy_rule_final")["same_cpu_kind_loss_rule"].values())


def arm_curve_seconds(run: dict, arm: str) -> float:
    return sum(seconds for stage, seconds in run["stage_seconds"].items() if stage.startswith(f"sweep_{arm}@"))


def cnn_curve_seconds(run: dict) -> float:
    return arm_curve_seconds(run, "cnn")


def verdicts_held(name: str, part: str | None = None) -> str:
    """The verdicts that held, "held of compared", in a second run's comparison file (or its ``part``)."""
    change = committed(name)
    change = change[part] if part else change
    return f"{change['held']} of {change['compared']}"


RERUN_AGAINST_BEFORE = "run_before_issue37/rerun_against_it.json"
REPLICATION = "run_before_accuracy_rule/replication/comparison.json"  # the loss rule's run's
COMMITTED_REPLICATION = "replication/comparison.json"  # the accuracy rule's run's, the committed one
ADOPTED_AGAINST_BEFORE = "run_before_accuracy_rule/adopted_against_it.json"  # the accuracy rule's run, the rerun


def grid_margins_points() -> list[float]:
    """Each edge choice's mean validation accuracy over its one-step-past value's, in points (the grid check)."""
    runs = committed("grid_edges.json")["runs"]
    return [100 * (r["chosen_val"]["val_acc"] - r["beyond_run"]["val_acc"]) for r in runs]


def floor_run(seed: int) -> dict:
    """The accuracy rule's kept run at the floor on ``seed``, trained again under both floors (floor_runs.json)."""
    return next(run for cell in committed("floor_runs.json")["cells"] for run in cell["runs"] if run["seed"] == seed)


def holm_survivors() -> int:
    """The curve's comparisons whose verdict survives Holm's correction in the committed run."""
    cells = [cell for by_size in committed("comparisons.json")["curve"].values() for cell in by_size.values()]
    return sum(cell["holm"] != "level" for cell in cells)


def kept_runs(name: str = "data_hunger.json") -> int:
    """The trained runs a curve kept: one per seed (``steps``' per-seed list) in every arm-by-size cell with a cap
    count."""
    cells = [cell for arm in committed(name)["runs"].values() for cell in arm.values() if "stopped_at_cap" in cell]
    return sum(len(cell["steps"]["per_seed"]) for cell in cells)


def runs_at_floor(name: str = "data_hunger.json") -> int:
    """Kept trained runs whose cooldown began at the plateau rule's floor, over every arm and size."""
    return sum(cell.get("stopped_at_floor", 0) for arm in committed(name)["runs"].values() for cell in arm.values())


def cross_kind_floor(arm: str, point: int) -> str:
    """The committed run's cross-kind check: its kept runs of ``arm`` at ``point`` whose cooldown began at the floor,
    as "k of n", from the saved point file (the check runs no data_hunger stage)."""
    from pipeline.results.curve_results import stopped_at_floor

    path = REPO / "metrics" / "rerun_cpu" / "progress" / "metrics" / "data_hunger" / f"{arm}_{point}.json"
    runs = json.loads(path.read_text())["runs"].values()
    window = yaml.safe_load((REPO / "params.yaml").read_text())["data_hunger"]["plateau_window"]
    return f"{sum(stopped_at_floor(run, window) for run in runs)} of {len(runs)}"


def cross_kind_rates(kept: bool = False) -> str:
    """The committed run's cross-kind check: the cells whose learning rate moved, "k of n"; with ``kept``, the most
    of the 15 arm-by-size cells that can keep theirs once every cell has run."""
    cells = [cell for arm in committed(CROSS_KIND)["learning_rates"].values() for cell in arm.values()]
    moved = sum(not cell["same"] for cell in cells)
    return f"{15 - moved} of 15" if kept else f"{moved} of {len(cells)}"


def cross_kind_parts() -> dict[str, float]:
    """The committed protocol's stage items timed on the Zen 4 kind in bf16, by its cross-kind check (what ``make
    repro`` sums there)."""
    from pipeline.results.repro_plan import committed_parts

    times = committed("repro_time.json")
    hardware = partial_run_for("issue37_cross_kind_accuracy_rule_transfer")["hardware"]
    return committed_parts(times, "cpu bf16", hardware)[0]


def replication_margins_under_a_point() -> str:
    """In how many arm-by-size cells the replication's chosen learning rate led the runner-up by under one point."""
    cells = [cell for arm in committed(REPLICATION)["learning_rates"].values() for cell in arm.values()]
    return f"{sum(cell['margin']['other'] < 0.01 for cell in cells)} of {len(cells)}"


def synthetic_verdicts() -> str:
    """Issue 38's H1-H3 in the README's words: "all NOT MET", "all MET", or each one's verdict."""
    met = {name: h["met"] for name, h in committed("synthetic.json")["hypotheses"].items()}
    if len(set(met.values())) == 1:
        return "all " + ("MET" if next(iter(met.values())) else "NOT MET")
    return ", ".join(f"{name} {'MET' if ok else 'NOT MET'}" for name, ok in met.items())


def figure4_direction() -> str:
    """H1, Figure 4's direction, as the README's opening states it."""
    return "appeared" if committed("synthetic.json")["hypotheses"]["H1"]["met"] else "did not appear"


AVX2_STUDY = "issue38_synthetic_avx2"  # the study's last three backbones, after the Sapphire Rapids was lost


def synthetic_seconds(stage: str, purpose: str = "issue38_synthetic"):
    """Issue 38's study's stage times on one machine (``purpose``: issue38_synthetic, the Sapphire Rapids in bf16;
    issue38_synthetic_avx2, the AVX2 EPYC in fp32): one stage's, or every item's of a stage (a name ending in @)."""
    runs = committed("repro_time.json")["partial_runs"]
    seconds = next(run for run in runs if run.get("purpose") == purpose)["stage_seconds"]
    return {k: v for k, v in seconds.items() if k.startswith(stage)} if stage.endswith("@") else seconds[stage]


def same_cpu_kind() -> dict:
    """Issue 37's stages that read a backbone against issue 21's full run, both in bf16 on a Sapphire Rapids."""
    runs = committed("repro_time.json")["partial_runs"]
    return next(run for run in runs if run.get("purpose") == "issue37_replication_final")["same_cpu_kind"]


def second_machine(stage: str) -> float:
    """A stage of the Zen 4 grid rerun that ran on a second machine of that kind."""
    return zen4_grid_rerun()["second_machine_stage_seconds"][stage]


def partial_minutes() -> float:
    return sum(partial_run()["stage_seconds"].values()) / 60


def core_speed(stage: str, when: str) -> float:
    return repro("cpu bf16")["core_speed_check"][stage][when]


def step_probe() -> str:
    return re.search(r"step ([\d.]+)x", repro("cpu bf16")["hardware"])[1]


def idle_probe() -> float:
    """The fp32 run's machine's step probe, timed idle three times after the run: their median."""
    return median(repro("cpu fp32")["step_probe_idle"]["ratios"])


def bf16_check() -> dict:
    """The fp32 run's machine, timed in bf16 after the run: a stage and our ViT's step."""
    return repro("cpu fp32")["same_machine_bf16_check"]


def min_bf16_speedup() -> float:
    from pipeline.train.runtime import MIN_BF16_SPEEDUP

    return MIN_BF16_SPEEDUP


REPRODUCIBILITY, RESULTS = "docs/reproducibility.md", "docs/results.md"
CROSS_KIND = "rerun_cpu/comparison.json"  # the committed run's check on another CPU kind
# The results the prose quotes by hand: (document, the words around the number, where the number comes from).
QUOTED = [
    ("README.md", "a {:.1f}M-parameter ViT", lambda: committed("backbone.json")["params"] / 1e6),
    ("README.md", "took {:.1f} minutes of stage time", lambda: repro("cpu bf16")["minutes"]),
    ("README.md", "({:.1f} wall)", lambda: repro("cpu bf16")["wall_minutes"]),
    ("README.md", "The previous protocol took {:.1f} minutes", lambda: round4()["minutes"]),
    ("README.md", "the small ResNet's curve took {:,.1f} s of stage time", lambda: cnn_curve_seconds(issue37_rerun())),
    ("README.md", "against {:,.1f} s in the full bf16 run", lambda: repro("cpu bf16")["stage_seconds"]["sweep_cnn"]),
    (
        "README.md",
        "The collapse stage, added after these full runs, took {:.1f} s",
        lambda: partial_run_for("collapse")["stage_seconds"]["collapse"],
    ),  # fmt: skip
    # the binomial standard error of one validation accuracy at 70%, in points, on the committed and the rerun's split
    ("docs/results.md", "at 70% accuracy: {:.1f} points on 300 images", lambda: 100 * (0.7 * 0.3 / 300) ** 0.5),
    ("docs/results.md", "{:.1f} points on 1,500 |", lambda: 100 * (0.7 * 0.3 / 1500) ** 0.5),
    ("README.md", "pre-registered rule it was {}ed for", lambda: committed("floor_rule.json")["verdict"]),
    ("docs/results.md", "`masked_patch` stage in {:.1f} s", lambda: floor_and_cross_kind()["masked_patch"]),
    ("docs/results.md", "`masked_patch_seeds` in {:.1f} s", lambda: floor_and_cross_kind()["masked_patch_seeds"]),
    ("docs/results.md", "the runs at the chosen rates take {:.0%}", lambda: pilot("adopted_rule")["kept_share"]),
    ("docs/results.md", "would have saved {:.0%} of that time", lambda: pilot("adopted_rule", AS_RUN_QUARTER)),
    ("docs/results.md", "in the {} cells done", lambda: pilot("adopted_rule", AS_RUN_QUARTER, "cells")),
    ("docs/results.md", "and {:.0%} in the", lambda: pilot("loss_rule_cross_kind", AS_RUN_QUARTER)),
    (
        "docs/results.md",
        "in the {} cells of the cross-kind",
        lambda: pilot("loss_rule_cross_kind", AS_RUN_QUARTER, "cells"),
    ),
    ("docs/results.md", "at half the budget saves {:.0%}", lambda: pilot("adopted_rule", AS_RUN_HALF)),
    ("docs/results.md", "Each of the other {} rules tried", lambda: len(changing_rules())),
    ("docs/results.md", "saving at most {:.0%}", lambda: max(r["saved_share"] for r in changing_rules())),
    ("README.md", "it took {:.1f} minutes", lambda: repro("cpu fp32")["minutes"]),
    ("README.md", "minutes ({:.1f} wall); bf16 is faster", lambda: repro("cpu fp32")["wall_minutes"]),
    (REPRODUCIBILITY, "runs at least {}x faster in bf16", min_bf16_speedup),
    (REPRODUCIBILITY, "step probe {}x", step_probe),
    (REPRODUCIBILITY, "plateau schedule | {:.1f} |", lambda: repro("cpu bf16")["minutes"]),
    (REPRODUCIBILITY, "the cosine schedule | {:.1f} |", lambda: cosine()["minutes"]),
    (REPRODUCIBILITY, "`linear_probe` {:.1f} s", lambda: repro("cpu bf16")["stage_seconds"]["linear_probe"]),
    (REPRODUCIBILITY, "against {:.1f} s, `train_scratch`", lambda: cosine()["stage_seconds"]["linear_probe"]),
    (REPRODUCIBILITY, "`train_scratch` {:.1f} s", lambda: repro("cpu bf16")["stage_seconds"]["train_scratch"]),
    (REPRODUCIBILITY, "against {:.1f} s, and as slow", lambda: cosine()["stage_seconds"]["train_scratch"]),
    (REPRODUCIBILITY, "300-step cap | {:.1f} |", lambda: round4()["minutes"]),
    (REPRODUCIBILITY, "the backbone {:.1f} s before", lambda: core_speed("backbone", "before")),
    (REPRODUCIBILITY, "changes, {:.1f} s after", lambda: core_speed("backbone", "after")),
    (REPRODUCIBILITY, "prediction {:.1f} s and", lambda: core_speed("masked_patch", "before")),
    (REPRODUCIBILITY, "and {:.1f} s (`core_speed_check`)", lambda: core_speed("masked_patch", "after")),
    (REPRODUCIBILITY, "took {:.1f} s for the supervised", lambda: partial_run()["stage_seconds"]["backbone"]),
    (REPRODUCIBILITY, "backbone and {:.1f} s for the masked", lambda: partial_run()["stage_seconds"]["masked_patch"]),
    (REPRODUCIBILITY, "against {:.1f} s and", lambda: repro("cpu bf16")["stage_seconds"]["backbone"]),
    (REPRODUCIBILITY, "s and {:.1f} s in the committed", lambda: repro("cpu bf16")["stage_seconds"]["masked_patch"]),
    (REPRODUCIBILITY, "and {:.1f} minutes for those two and the curve", partial_minutes),
    (REPRODUCIBILITY, "the same | {:.1f} |", lambda: repro("cpu fp32")["minutes"]),
    (REPRODUCIBILITY, "check above: {:.1f} stage minutes", lambda: repro("cpu fp32")["minutes"]),
    (REPRODUCIBILITY, "minutes and {:.1f} wall", lambda: repro("cpu fp32")["wall_minutes"]),
    (REPRODUCIBILITY, "(step {:.2f}x; `step_probe_idle`", lambda: idle_probe()),
    (REPRODUCIBILITY, "(`train_scratch` {:.1f} s", lambda: repro("cpu fp32")["stage_seconds"]["train_scratch"]),
    (REPRODUCIBILITY, "took {:.1f} s in bf16", lambda: bf16_check()["masked_patch_bf16_s"]),
    (REPRODUCIBILITY, "the two widened arms took {:.1f} stage minutes", lambda: grid_rerun()["minutes"]),
    ("README.md", "learning-rate grids: {:.1f} stage minutes", lambda: grid_rerun()["minutes"]),
    (REPRODUCIBILITY, "stage minutes ({:.1f} wall", lambda: grid_rerun()["wall_minutes"]),
    (REPRODUCIBILITY, "the supervised backbone {:.1f} s", lambda: grid_rerun()["stage_seconds"]["backbone"]),
    (REPRODUCIBILITY, "idle it read {:.3f}x", lambda: grid_rerun()["step_probe"]["idle_fastest"][0]),
    (REPRODUCIBILITY, "(medians), read {:.2f}x, so", lambda: median(bf16_check()["probe_our_vit"]["ratios"])),
    (REPRODUCIBILITY, "against {:.1f} s in fp32", lambda: bf16_check()["masked_patch_fp32_s"]),
    (REPRODUCIBILITY, "took {:.1f} ms in bf16", lambda: bf16_check()["vit_step_ms_batch64"]["bf16"]),
    (REPRODUCIBILITY, "against {:.1f} ms in fp32", lambda: bf16_check()["vit_step_ms_batch64"]["fp32"]),
    (REPRODUCIBILITY, "`linear_probe` {:.1f} s, with", lambda: repro("cpu fp32")["stage_seconds"]["linear_probe"]),
    (RESULTS, "kept {} and", lambda: verdicts_held("precision_change.json")),
    (RESULTS, "and {} verdicts, every interval", lambda: verdicts_held("precision_change_zen4.json")),
    (RESULTS, "the table below), {} verdicts held", lambda: verdicts_held(REPLICATION)),
    (RESULTS, "(the last section): it kept {} verdicts", lambda: verdicts_held(REPLICATION)),
    ("README.md", "which kept {} of that run's verdicts", lambda: verdicts_held(REPLICATION)),
    (RESULTS, "is met, at its edge: {} held", lambda: verdicts_held(COMMITTED_REPLICATION)),
    (RESULTS, "None of the {} verdicts that survive Holm", holm_survivors),
    (RESULTS, "now calls all {} settled", holm_survivors),
    (
        RESULTS,
        "the same in {} arm-by-size cells (the loss",
        lambda: committed(COMMITTED_REPLICATION)["same_learning_rate"],
    ),
    (RESULTS, "(the loss rule's replication: {}):", lambda: committed(REPLICATION)["same_learning_rate"]),
    (RESULTS, "none of its {} kept runs ended", lambda: kept_runs("replication/data_hunger.json")),
    (RESULTS, "ended at the cap, and {} began", lambda: runs_at_floor("replication/data_hunger.json")),
    (RESULTS, "with fresh seeds kept {} of its verdicts", lambda: verdicts_held(COMMITTED_REPLICATION)),
    (REPRODUCIBILITY, 'with fresh seeds": {} verdicts held', lambda: verdicts_held(COMMITTED_REPLICATION)),
    (REPRODUCIBILITY, "The rate moved in {} cells, so issue", cross_kind_rates),
    ("README.md", "`_transfer`): {:.1f} stage minutes", lambda: sum(cross_kind_parts().values()) / 60),
    ("README.md", "stage minutes for those {} stage items", lambda: len(cross_kind_parts())),
    ("README.md", "purpose `issue21_same_kind`): {:.1f} stage minutes", lambda: issue21_same_kind()["minutes"]),
    ("README.md", "There, the {} stage items", lambda: same_kind("items")),
    ("README.md", "timed took {:.2f}x their time", lambda: same_kind("ratio")),
    ("README.md", "({:.1f} against", lambda: same_kind("issue37_minutes")),
    ("README.md", "against {:.1f} stage minutes), where", lambda: same_kind("issue21_minutes")),
    (RESULTS, "the committed protocol took {:.2f}x issue 21's time in the stage items", lambda: same_kind("ratio")),
    (RESULTS, "the curve trains {:.2f}x issue 21's runs", lambda: accounting_ratio("runs")),
    (RESULTS, "its kept runs take {:.2f}x the training images", lambda: accounting_ratio("train_images")),
    (RESULTS, "and they score {:.1f}x the validation images", lambda: accounting_ratio("val_images")),
    (RESULTS, "as it was ({} of 15 cells changed)", lambda: halving("data_hunger", "keep 2", "choices_changed")),
    (
        RESULTS,
        "and {} of 15 of its fresh-seed replication's",
        lambda: halving("replication", "keep 2", "choices_changed"),
    ),
    (RESULTS, "and trains {} runs where", lambda: halving("data_hunger", "keep 2", "runs")),
    (RESULTS, "where the committed run trained {} (the", lambda: halving("data_hunger", "runs_now")),
    (RESULTS, "(the replication {}).", lambda: halving("replication", "runs_now")),
    (RESULTS, "Halving to 1 changes {} of 15 choices", lambda: halving("data_hunger", "keep 1", "choices_changed")),
    (RESULTS, "to 3 none but trains {}:", lambda: halving("data_hunger", "keep 3", "runs")),
    (RESULTS, "the kept runs score from {:,} to", lambda: halving("data_hunger", "val_images_now")),
    (RESULTS, "to {:,} in the committed run's curves", lambda: halving("data_hunger", "val_images_monitored")),
    (RESULTS, "(on the Zen 4: issue 21's {:.1f} stage minutes there)", lambda: same_kind("issue21_minutes")),
    (RESULTS, "this kind timed, {} have run", lambda: compute_rule("items_done")),
    (RESULTS, "have run: {:.1f} stage minutes against issue 21's", lambda: compute_rule("minutes")),
    (RESULTS, "against issue 21's {:.1f} for the same items", lambda: compute_rule("issue21_minutes")),
    (RESULTS, "for the same items ({:.2f}x)", lambda: compute_rule("ratio")),
    (RESULTS, "and {:.2f}x the committed protocol's", lambda: compute_rule("ratio_to_committed")),
    (RESULTS, "the committed protocol's {:.1f} there", lambda: compute_rule("committed_minutes")),
    (RESULTS, "which took {:.1f} stage minutes under issue 21 here", lambda: compute_rule("to_run_issue21_minutes")),
    (RESULTS, "if they take at most {:.1f}.", lambda: compute_rule("allowance_minutes")),
    ("README.md", "the curve trains {:.2f}x the runs", lambda: accounting_ratio("runs")),
    ("README.md", "take {:.2f}x the training images", lambda: accounting_ratio("train_images")),
    ("README.md", "score {:.1f}x the validation images", lambda: accounting_ratio("val_images")),
    (REPRODUCIBILITY, "sweeps at 10 per class {:.2f}x to", lambda: min(smallest_sweeps_same_kind())),
    (REPRODUCIBILITY, "to {:.2f}x: their runs are short", lambda: max(smallest_sweeps_same_kind())),
    (REPRODUCIBILITY, "this check: {} kept theirs", lambda: cross_kind_rates(kept=True)),
    (REPRODUCIBILITY, "of those it can compare, {} kept theirs", lambda: verdicts_held(CROSS_KIND)),
    (REPRODUCIBILITY, "begins at it in {} of fine-tuning's kept runs", lambda: cross_kind_floor("finetune", 0)),
    (REPRODUCIBILITY, "and in {} of the ViT from scratch's", lambda: cross_kind_floor("scratch", 0)),
    (RESULTS, "are under one point in {} cells", lambda: replication_margins_under_a_point()),
    (RESULTS, "`evaluate` took {:.2f}x their time there", lambda: same_cpu_kind()["total_ratio"]),
    (RESULTS, "the transfer arms alone {:.2f}x", lambda: same_cpu_kind()["ratio"]["sweep_pretrained"]),
    ("README.md", "took {:.2f}x the time of the same stages", lambda: same_cpu_kind()["total_ratio"]),
    ("README.md", "rendering its images took {:.1f} s", lambda: synthetic_seconds("synthetic_data")),
    ("README.md", "its 4,000 steps {:.1f} to", lambda: min(synthetic_seconds("synthetic_pretrain@").values())),
    ("README.md", "to {:.1f} s and fine-tuning", lambda: max(synthetic_seconds("synthetic_pretrain@").values())),
    ("README.md", "fine-tuning one {:.1f} to", lambda: min(synthetic_seconds("synthetic_finetune@").values())),
    ("README.md", "to {:.1f} s, each stage", lambda: max(synthetic_seconds("synthetic_finetune@").values())),
    ("README.md", "It has run in full: H1-H3 are {}", synthetic_verdicts),
    ("docs/synthetic.md", "The study has run in full, and H1-H3 are {} (", synthetic_verdicts),
    ("README.md", "Figure 4's direction {} at this scale", figure4_direction),
    ("README.md", "it rendered them in {:.1f} s", lambda: synthetic_seconds("synthetic_data", AVX2_STUDY)),
    ("README.md", "backbone in {:.1f} to", lambda: min(synthetic_seconds("synthetic_pretrain@", AVX2_STUDY).values())),
    (
        "README.md",
        "to {:.1f} s and fine-tuned",
        lambda: max(synthetic_seconds("synthetic_pretrain@", AVX2_STUDY).values()),
    ),
    (
        "README.md",
        "fine-tuned one in {:.1f} to",
        lambda: min(synthetic_seconds("synthetic_finetune@", AVX2_STUDY).values()),
    ),
    (
        "README.md",
        "to {:.1f} s, each stage under half",
        lambda: max(synthetic_seconds("synthetic_finetune@", AVX2_STUDY).values()),
    ),
    (RESULTS, "the rerun kept {} of these verdicts", lambda: verdicts_held(RERUN_AGAINST_BEFORE)),
    ("README.md", "the rerun kept {} of the curve's verdicts", lambda: verdicts_held(RERUN_AGAINST_BEFORE)),
    ("README.md", "the accuracy rule's run kept {} of the curve's", lambda: verdicts_held(ADOPTED_AGAINST_BEFORE)),
    ("README.md", "the stages it ran took {:.1f} stage minutes", adopted_minutes),
    ("docs/results.md", "every choice holds, by {:.1f} to", lambda: min(grid_margins_points())),
    ("docs/results.md", "and scores {:.2f} points more on validation", lambda: 100 * floor_run(4)["val_change"]),
    ("docs/results.md", "images) and {:.2f} points more on test", lambda: 100 * floor_run(4)["test_change"]),
    ("docs/results.md", "to {:.1f} points of mean validation", lambda: max(grid_margins_points())),
    ("README.md", "minutes ({:.1f} without the pauses", lambda: adopted_minutes(pauses=False)),
    ("README.md", "the small ResNet's curve {:,.1f} s and", lambda: cnn_curve_seconds(adopted_run())),
    ("README.md", "the ViT from scratch's {:,.1f} s of them", lambda: arm_curve_seconds(adopted_run(), "scratch")),
    ("README.md", "sweep took {:.2f}x to", lambda: min(adopted_sweep_ratios())),
    (
        "README.md",
        "Zen 4 (purpose `issue37_replication_accuracy_rule_final`): {:.1f} stage minutes",
        lambda: sum(partial_run_for("issue37_replication_accuracy_rule_final")["stage_seconds"].values()) / 60,
    ),
    ("README.md", "on that kind, {:.2f}x to", lambda: min(replication_final_ratios())),
    ("README.md", "to {:.2f}x its time.", lambda: max(replication_final_ratios())),
    ("README.md", "to {:.2f}x the same stage under the loss rule", lambda: max(adopted_sweep_ratios())),
    (
        "README.md",
        "learning rate in {} arm-by-size cells",
        lambda: committed(ADOPTED_AGAINST_BEFORE)["same_learning_rate"],
    ),
    ("README.md", "{} of its 75 kept runs began", runs_at_floor),
    ("README.md", "floor (the rerun: {}), none", lambda: runs_at_floor("run_before_accuracy_rule/data_hunger.json")),
    (RESULTS, "this axis kept {} shared verdicts", lambda: verdicts_held(RERUN_AGAINST_BEFORE, "pretraining")),
    (
        RESULTS,
        "was the same in {} arm-by-size",
        lambda: committed(REPLICATION)["same_learning_rate"],
    ),
    (REPRODUCIBILITY, "{} of the curve's", lambda: verdicts_held("precision_change.json").split(" of ")[0]),
    (REPRODUCIBILITY, "overlaps and {} verdicts held", lambda: verdicts_held("precision_change_zen4.json")),
    (REPRODUCIBILITY, "took {:.1f} s for the small ResNet's curve", lambda: cnn_curve_seconds(zen4_grid_rerun())),
    (REPRODUCIBILITY, "against {:.1f} s in bf16 on the grid", lambda: cnn_curve_seconds(grid_rerun())),
    (REPRODUCIBILITY, "{:.1f} s for the transfer arms at 1,000", lambda: second_machine("sweep_pretrained@4")),
    (REPRODUCIBILITY, "against {:.1f} s there", lambda: grid_rerun()["stage_seconds"]["sweep_pretrained@4"]),
    (REPRODUCIBILITY, "stage took {:.1f} s against", lambda: second_machine("masked_patch")),
    (REPRODUCIBILITY, "against {:.1f} s on the first", lambda: zen4_grid_rerun()["stage_seconds"]["masked_patch"]),
    (REPRODUCIBILITY, "1,000 per class, in {:.1f} s.", lambda: second_machine("sweep_scratch@4")),
    (REPRODUCIBILITY, "took {:.1f} s in bf16 on a 2-core", lambda: stretch_run()["stage_seconds"]["masked_patch_long"]),
]
NOT_RESULTS = {  # decimal numbers in the prose that no rerun changes
    "3.10": "the Python version the project needs",
    "2.14": "the torch version whose API the detector works around",
    "4.6": "the paper's section",
    "1.5": "issue 37's bound on the stage time against issue 21's on the same CPU kind",
    "2.1e-6": "the logit parity with torchvision that tests/unit/models/test_vit.py checks",
}


def leaves(tree) -> list[float]:
    if isinstance(tree, dict):
        return [v for value in tree.values() for v in leaves(value)]
    if isinstance(tree, list):
        return [v for value in tree for v in leaves(value)]
    return [float(tree)] if isinstance(tree, (int, float)) and not isinstance(tree, bool) else []


def settings() -> set[str]:
    return {f"{abs(v):.3f}" for v in leaves(yaml.safe_load((REPO / "params.yaml").read_text()))}


def prose(text: str) -> str:
    """``text`` without its generated tables."""
    return re.sub(r"<!-- generated: (\w+) -->\n.*?<!-- /generated: \1 -->", "", text, flags=re.DOTALL)


def quoted_results(text: str) -> set[str]:
    return set(NUMBER.findall(prose(text))) - settings()


def test_the_prose_quotes_no_result_of_its_own():
    """A result quoted by hand goes stale at the next rerun, so the prose cites the generated tables instead."""
    for name in DOCUMENTS:
        assert not quoted_results((REPO / name).read_text()), f"{name} quotes results outside its generated tables"


def test_the_readme_reports_its_results_through_generated_tables():
    for name in DOCUMENTS:
        text = (REPO / name).read_text()
        assert NUMBER.findall(text) and not quoted_results(text)
    assert "<!-- generated: headline -->" in (REPO / "README.md").read_text()


def test_the_check_catches_a_number_typed_into_the_prose_but_not_a_setting_or_a_table():
    assert NUMBER.findall("0.524 ± 0.003, lr 0.0001, 10.123, (0.673)") == ["0.524", "0.003", "0.673"]
    table = "<!-- generated: curve -->\n| 0.612 |\n<!-- /generated: curve -->\n"
    assert quoted_results(table + "the pretrained arm reaches 0.612 here") == {"0.612"}
    assert quoted_results(table + "after it") == set()
    assert quoted_results("warmup_fraction 0.100 of the steps") == set()  # backbone.warmup_fraction: 0.1


def words(text: str) -> str:
    """``text``'s prose with every run of whitespace one space, so a quote may span a line break."""
    return " ".join(prose(text).split())


def test_each_result_quoted_by_hand_is_the_committed_value_of_its_key():
    for name, around, value in QUOTED:
        expected = around.format(value())
        assert expected in words((REPO / name).read_text()), f"{name} should say {expected!r}"


def test_every_decimal_number_in_the_prose_is_a_setting_a_checked_quote_or_no_result():
    params = set(leaves(yaml.safe_load((REPO / "params.yaml").read_text())))
    for name in DOCUMENTS:
        quoted = {
            number for doc, around, value in QUOTED if doc == name for number in DECIMAL.findall(around.format(value()))
        }
        unexplained = {
            number
            for number in DECIMAL.findall(words((REPO / name).read_text()))
            if float(number) not in params and number not in quoted and number not in NOT_RESULTS
        }
        assert unexplained == set(), f"{name}: quote these through QUOTED (their key) or a table"


def test_the_readme_states_the_committed_validation_split_and_choice_seeds():
    """Settings the README states in words go stale silently when params.yaml changes: these two did once."""
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    readme = words((REPO / "README.md").read_text())
    held_out = params["validation"]["offline_per_class"]
    assert f"after {held_out} per class are held out for validation" in readme
    numbers = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five"}
    assert f"`data_hunger.choice_seeds` seeds ({numbers[params['data_hunger']['choice_seeds']]})" in readme


def test_issue_37s_same_kind_ratio_is_the_committed_parts_over_issue_21s_run_on_that_kind():
    """The README's ratio for issue 37's bound on compute, recomputed from the stage seconds in the file."""
    from pipeline.results.repro_plan import committed_parts

    run = issue21_same_kind()
    parts, _ = committed_parts(committed("repro_time.json"), "cpu bf16", run["hardware"])
    issue21 = {item: s - run.get("paused_seconds", {}).get(item, 0) for item, s in run["stage_seconds"].items()}
    both = [item for item in parts if item in issue21]
    assert len(both) == same_kind("items") and set(parts) - set(both) == set(same_kind("issue37_only"))
    assert round(sum(parts[i] for i in both) / sum(issue21[i] for i in both), 2) == same_kind("ratio")
    assert round(sum(issue21.values()) / 60, 1) == run["minutes"]


def test_the_compute_rules_ratio_so_far_is_its_stage_seconds_over_issue_21s_on_that_kind():
    """The compute rule's full run, as far as it has run: its items' seconds (less pauses) over issue 21's."""
    run, issue21 = partial_run_for("issue37_compute_rule"), issue21_same_kind()
    so_far = run["same_cpu_kind_issue21"]
    net = {item: s - run["paused_seconds"].get(item, 0) for item, s in run["stage_seconds"].items()}
    before = {item: s - issue21.get("paused_seconds", {}).get(item, 0) for item, s in issue21["stage_seconds"].items()}
    done = list(so_far["per_item"])
    assert so_far["items_done"] == len(done) and set(done) <= set(net)
    assert set(done) | set(so_far["restored"]) | set(so_far["to_run"]) == set(same_kind("per_item"))
    assert round(sum(net[item] for item in done) / 60, 1) == so_far["minutes"]
    assert round(sum(net[item] for item in done) / sum(before[item] for item in done), 2) == so_far["ratio"]
