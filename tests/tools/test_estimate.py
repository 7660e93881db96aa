"""Tool estimate: the line `make repro` prints before it starts, from metrics/repro_time.json."""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.results.repro_plan import committed_parts
from pipeline.tools.estimate import cpu_kind, estimate_line

REPO = Path(__file__).resolve().parents[2]
TIMES = {"runs": {"cpu fp32": {"minutes": 31.4, "machine": "a 2-core AVX2 machine"}}}


def test_a_timed_setting_gives_its_minutes_and_machine():
    line = estimate_line("cpu fp32", "AVX2, no native bf16", TIMES)
    assert line == (
        "dvc repro from scratch runs in cpu fp32 (AVX2, no native bf16): about 31 min, measured on "
        "a 2-core AVX2 machine; stages already up to date are skipped"
    )


def test_an_untimed_setting_says_so_and_lists_what_was_timed():
    line = estimate_line("cuda bf16", "NVIDIA H200", TIMES)
    assert "no full run was timed in that setting (cpu fp32: 31 min)" in line


def test_a_run_under_another_protocol_says_which():
    times = {"runs": {"cpu fp32": {"minutes": 82.0, "machine": "a 2-core AVX2 EPYC", "protocol": "issue 11 (3 seeds)"}}}
    line = estimate_line("cpu fp32", "AVX2, no native bf16", times)
    assert "about 82 min, measured on a 2-core AVX2 EPYC under issue 11 (3 seeds);" in line


def test_a_run_under_an_older_protocol_than_the_committed_one_says_to_expect_longer():
    run = {"minutes": 82.0, "machine": "a 2-core AVX2 EPYC", "protocol": "issue 21"}
    times = {"protocol": "issue 37 (3 choice seeds)", "runs": {"cpu fp32": run}}
    line = estimate_line("cpu fp32", "AVX2, no native bf16", times)
    first, second = line.splitlines()
    assert first.endswith("a 2-core AVX2 EPYC under issue 21; stages already up to date are skipped")
    assert second == (
        "expect longer: the committed protocol (issue 37) trains more runs than issue 21 and has no "
        "full run timed yet; its parts' times are partial_runs in metrics/repro_time.json"
    )
    run["protocol"] = "issue 37 (3 choice seeds)"
    assert "expect longer" not in estimate_line("cpu fp32", "AVX2, no native bf16", times)
    committed = json.loads((REPO / "metrics" / "repro_time.json").read_text())
    assert committed["protocol"].startswith("issue 37")  # the committed params' protocol: issue 37's


def test_a_run_timed_on_another_cpu_kind_says_so():
    times = {
        "runs": {"cpu fp32": {"minutes": 82.0, "machine": "a 2-core AVX2 EPYC", "hardware": "AVX2, no native bf16"}}
    }
    zen4 = estimate_line("cpu fp32", "AVX512, bf16 not faster: avx512_bf16 (step 0.78x)", times)
    assert "(another CPU kind: AVX2, no native bf16; this one's time will differ)" in zen4
    same = estimate_line("cpu fp32", "AVX2, no native bf16", times)
    assert "another CPU kind" not in same


def test_the_real_hardware_string_names_this_cpu_kind():
    from pipeline.train.runtime import describe_cpu

    kind = cpu_kind(describe_cpu())  # the real detector, nothing patched; unprobed, so no timing runs
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    for feature in ("avx512_bf16", "amx_bf16"):
        assert (feature in kind) == (feature in flags.split())


def test_the_committed_times_are_measurements_of_both_cpu_precisions():
    times = json.loads((REPO / "metrics" / "repro_time.json").read_text())
    assert "estimates" not in times  # measured runs only
    assert {"cpu fp32", "cpu bf16"} <= set(times["runs"])
    assert all(run["minutes"] > 0 and run["machine"] and run["stage_seconds"] for run in times["runs"].values())


def test_a_run_on_another_cpu_kind_cites_an_earlier_run_on_this_kind_where_there_is_one():
    times = {
        "runs": {"cpu fp32": {"minutes": 112.0, "machine": "a Sapphire Rapids", "hardware": "AVX512, amx_bf16"}},
        "earlier": [
            {"minutes": 94.5, "runtime": "cpu bf16", "hardware": "AVX2, no native bf16"},  # another precision
            {"minutes": 82.0, "runtime": "cpu fp32", "hardware": "AVX2, no native bf16", "protocol": "issue 11"},
        ],
    }
    avx2 = estimate_line("cpu fp32", "AVX2, no native bf16", times)
    assert "this one's time will differ; on this kind an earlier protocol (issue 11) took about 82 min)" in avx2
    zen4 = estimate_line("cpu fp32", "AVX512, bf16 not faster: avx512_bf16 (step 0.78x)", times)
    assert "this one's time will differ)" in zen4 and "earlier protocol" not in zen4


def test_where_the_committed_protocol_was_timed_in_parts_on_this_kind_the_line_sums_them():
    part = {
        "purpose": "adopted",
        "hardware": "AVX2, no native bf16",
        "precision": "fp32 (runtime.precision: auto)",
        "stage_seconds": {"sweep_cnn@4": 3600.0, "evaluate": 20.0},
        "paused_seconds": {"sweep_cnn@4": 20},
    }
    full = {"minutes": 112.0, "machine": "a Sapphire Rapids", "protocol": "issue 21"}
    times = {"protocol": "issue 37", "committed_parts": ["adopted"], "partial_runs": [part], "runs": {"cpu fp32": full}}
    line = estimate_line("cpu fp32", "AVX2, no native bf16", times)
    assert line == (
        "dvc repro from scratch runs in cpu fp32 (AVX2, no native bf16): about 60 min, the committed protocol's "
        "stages as timed in parts on this CPU kind (2 stage items, partial_runs adopted in metrics/repro_time.json; a "
        "stage not among them was never timed here); stages already up to date are skipped"
    )
    elsewhere = estimate_line("cpu bf16", "AVX512, native bf16: avx512_bf16+amx_bf16 (step 1.42x)", times)
    assert "in parts" not in elsewhere
    full["stage_seconds"] = {"sweep_cnn": 1100.0, "evaluate": 12.0, "ablation": 94.0, "pretrain_scale": 367.0}
    assert line.replace("; a stage not among them was never timed here)", "), plus the 2 stages never timed here "
                        "(ablation, pretrain_scale): about 8 min in the full run on a Sapphire Rapids") == (
        estimate_line("cpu fp32", "AVX2, no native bf16", times)
    )  # fmt: skip
    full["stage_runs"] = {"sweep_cnn": 5, "evaluate": 1, "ablation": 1, "pretrain_scale": 8}
    assert estimate_line("cpu fp32", "AVX2, no native bf16", times).endswith(
        "a Sapphire Rapids; not counted: the items never timed here of sweep_cnn (1 of 5 items); stages already up to "
        "date are skipped"
    )


def test_the_committed_parts_time_every_trained_arm_and_backbone_on_the_kind_they_ran():
    times = json.loads((REPO / "metrics" / "repro_time.json").read_text())
    runs = {run.get("purpose"): run for run in times["partial_runs"]}
    assert times["committed_parts"][0] == "issue37_adopted_rule"  # the committed run itself, newest first
    seconds, used = committed_parts(times, "cpu fp32", runs["issue37_adopted_rule"]["hardware"])
    trained = [f"sweep_{arm}@{point}" for arm in ("scratch", "cnn", "pretrained") for point in range(5)]
    assert set(trained + ["backbone", "masked_patch", "masked_patch_seeds", "collapse"]) <= set(seconds)
    assert used == ["issue37_adopted_rule", "issue37_rerun_continued"]
    # the committed run's check on another kind ran its trained stages with its seeds: parts on that kind only
    cross_kind = [purpose for purpose in times["committed_parts"] if purpose.startswith("issue37_cross_kind")]
    zen4 = runs[cross_kind[0]]["hardware"]
    seconds, used = committed_parts(times, "cpu bf16", zen4)
    assert used == cross_kind and cpu_kind(zen4) != cpu_kind(runs["issue37_adopted_rule"]["hardware"])
    assert set(seconds) <= {*trained, "backbone", "masked_patch", "masked_patch_seeds", *(
        f"sweep_pixels@{point}" for point in range(5))}  # fmt: skip


def test_a_truncated_repro_time_file_is_one_line_naming_it(tmp_path):
    import subprocess
    import sys

    from project_copy import clean_env

    (tmp_path / "metrics").mkdir()
    committed = (Path(__file__).resolve().parents[2] / "metrics/repro_time.json").read_text()
    (tmp_path / "metrics/repro_time.json").write_text(committed[: len(committed) // 2])
    (tmp_path / "params.yaml").write_text((Path(__file__).resolve().parents[2] / "params.yaml").read_text())
    result = subprocess.run([sys.executable, "-m", "pipeline.tools.estimate"], cwd=tmp_path, env=clean_env(),
                            capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert "metrics/repro_time.json is not valid JSON" in line and "truncated or damaged" in line


def test_stages_newer_than_every_timed_run_are_named_as_not_counted():
    part = {
        "purpose": "p",
        "hardware": "AVX2, no native bf16",
        "precision": "fp32",
        "stage_seconds": {"sweep_cnn@0": 60.0},
    }
    full = {"minutes": 112.0, "machine": "a Sapphire Rapids", "stage_seconds": {"sweep_cnn": 100.0, "plot": 2.0}}
    times = {"committed_parts": ["p"], "partial_runs": [part], "runs": {"cpu fp32": full}}
    line = estimate_line("cpu fp32", "AVX2, no native bf16", times, ["sweep_cnn", "plot", "collapse", "a_new_stage"])
    assert "; not counted: a_new_stage, collapse, timed neither here nor in that full run;" in line
    assert "not counted" not in estimate_line("cpu fp32", "AVX2, no native bf16", times, ["sweep_cnn", "plot"])


def test_the_stage_names_come_from_the_real_dvc_yaml(tmp_path):
    from pipeline.tools.estimate import dvc_stage_names

    names = dvc_stage_names(REPO / "dvc.yaml")
    assert {"download", "sweep_scratch", "sweep_pretrained", "collapse", "summary"} <= set(names)
    assert all("@" not in name for name in names)  # foreach/matrix stages once, by name
    assert dvc_stage_names(tmp_path / "dvc.yaml") == []
