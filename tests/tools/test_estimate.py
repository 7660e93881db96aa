"""Tool estimate: the line `make repro` prints before it starts, from metrics/repro_time.json."""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.tools.estimate import estimate_line

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


def test_the_committed_times_are_measurements_of_both_cpu_precisions():
    times = json.loads((REPO / "metrics" / "repro_time.json").read_text())
    assert "estimates" not in times  # measured runs only
    assert {"cpu fp32", "cpu bf16"} <= set(times["runs"])
    assert all(run["minutes"] > 0 and run["machine"] and run["stage_seconds"] for run in times["runs"].values())
