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


def test_an_estimated_setting_says_it_is_an_estimate_and_its_basis():
    times = {**TIMES, "estimates": {"cpu bf16": {"minutes": 24.6, "basis": "fp32 time x 0.39"}}}
    line = estimate_line("cpu bf16", "AVX512-BF16", times)
    assert line.startswith("dvc repro from scratch runs in cpu bf16 (AVX512-BF16): about 25 min, estimated (fp32 ")
    assert line.endswith("no full run was timed in that setting (cpu fp32: 31 min)")


def test_the_committed_times_cover_both_cpu_precisions():
    times = json.loads((REPO / "metrics" / "repro_time.json").read_text())
    assert "cpu fp32" in times["runs"] and "cpu bf16" in {**times["runs"], **times.get("estimates", {})}
    assert all(run["minutes"] > 0 and run["machine"] for run in times["runs"].values())
