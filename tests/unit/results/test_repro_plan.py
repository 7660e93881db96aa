"""pipeline.results.repro_plan: DVC's stage lines, its graph, the stages a command selects and will run, and a stage's
measured seconds."""

from __future__ import annotations

import pytest
from helpers import DOT

from pipeline.results.repro_plan import (
    Event,
    Selection,
    committed_parts,
    make_plan,
    measured_stage_seconds,
    measurements,
    parse_event,
    read_graph,
    read_selection,
)

GRAPH = read_graph(DOT)


def test_both_kinds_of_dvc_stage_line_parse_and_other_lines_do_not():
    assert parse_event("Running stage 'sweep_cnn@2':\n") == Event("sweep_cnn@2", ran=True)
    assert parse_event("Stage 'plot' didn't change, skipping\n") == Event("plot", ran=False)
    assert parse_event("Stage 'prepare' is cached - skipping run, checking out outputs\n") == Event("prepare", False)
    assert parse_event("> python -m pipeline.stages.sweep cnn 2\n") is None
    assert parse_event("INFO stage sweep finished: Running stage 'x': in a message\n") is None


def test_the_graph_reads_every_stage_and_edge_of_dvc_dag():
    assert GRAPH["prepare"] == {"sweep_cnn@0", "sweep_cnn@1"}
    assert GRAPH["plot"] == set() and GRAPH["summary"] == set()


def test_the_plan_runs_every_stage_after_a_changed_one_and_skips_the_rest():
    plan = make_plan(GRAPH, {"sweep_cnn@1"}, Selection())
    assert plan.stages == set(GRAPH)
    assert plan.to_run == {"sweep_cnn@1", "plot"}  # plot's own inputs are unchanged until sweep_cnn@1 reruns
    assert make_plan(GRAPH, set(), Selection(force=True)).to_run == set(GRAPH)


def test_targets_narrow_the_total_as_dvc_repro_does():
    def stages(*args: str) -> set[str] | None:
        plan = make_plan(GRAPH, set(GRAPH), read_selection(list(args)))
        return None if plan is None else set(plan.stages)

    assert stages("sweep_cnn") == {"download", "prepare", "sweep_cnn@0", "sweep_cnn@1"}  # foreach: its items
    assert stages("-s", "sweep_cnn@0") == {"sweep_cnn@0"}
    assert stages("--downstream", "sweep_cnn@0", "-f") == {"sweep_cnn@0", "plot"}
    assert stages("-p", "summary") == {"summary"}
    assert stages("no_such_stage") is None
    assert read_selection(["-fi"]).interactive


def test_a_stage_item_takes_its_own_measured_time_else_its_share_of_its_stage():
    run = {"item_seconds": {"sweep_cnn@0": 50.6}, "stage_seconds": {"sweep_cnn": 973.9, "plot": 1.1},
           "stage_runs": {"sweep_cnn": 5}}  # fmt: skip
    assert measured_stage_seconds(run, "sweep_cnn@0") == 50.6
    assert measured_stage_seconds(run, "sweep_cnn@3") == pytest.approx(973.9 / 5)
    assert measured_stage_seconds(run, "sub/dvc.yaml:plot") == 1.1
    assert measured_stage_seconds(run, "masked_patch_long") is None


AVX2 = "AVX2, no native bf16"
PARTS = {
    "committed_parts": ["newest", "older"],
    "runs": {"cpu fp32": {"minutes": 112.0, "machine": "a Sapphire Rapids", "stage_seconds": {"plot": 2.0}}},
    "partial_runs": [
        {"purpose": "older", "hardware": AVX2, "precision": "fp32 (auto)",
         "stage_seconds": {"sweep_cnn@0": 300.0, "analysis": 30.0}},
        {"purpose": "newest", "hardware": AVX2, "precision": "fp32 (auto)",
         "stage_seconds": {"sweep_cnn@0": 500.0}, "paused_seconds": {"sweep_cnn@0": 100}},
        {"purpose": "not a part", "hardware": AVX2, "precision": "fp32 (auto)", "stage_seconds": {"evaluate": 9.0}},
        {"purpose": "older", "hardware": "AVX512, native bf16: avx512_bf16+amx_bf16", "precision": "bf16",
         "stage_seconds": {"evaluate": 9.0}},
    ],
}  # fmt: skip


def test_the_committed_protocols_parts_on_this_kind_take_the_newest_time_of_each_stage_less_its_pauses():
    seconds, used = committed_parts(PARTS, "cpu fp32", AVX2)
    assert seconds == {"sweep_cnn@0": 400.0, "analysis": 30.0}  # 500 s less its 100 s paused, not the older 300 s
    assert used == ["newest", "older"]
    run, source = measurements(PARTS, "cpu fp32", AVX2)
    assert measured_stage_seconds(run, "analysis") == 30.0 and "newest, older" in source
    assert measured_stage_seconds(run, "plot") == 2.0  # a stage no part timed keeps the full run's time


def test_parts_timed_on_another_cpu_kind_or_precision_or_device_say_nothing_here():
    for key, hardware in (("cpu fp32", "AVX512, native bf16: avx512_bf16 (step 1.73x)"), ("cpu bf16", AVX2),
                          ("cuda bf16", AVX2), (None, AVX2)):  # fmt: skip
        assert committed_parts(PARTS, key, hardware) == ({}, [])
    run, source = measurements(PARTS, "cpu fp32", "AVX512, native bf16: avx512_bf16 (step 1.73x)")
    assert run == PARTS["runs"]["cpu fp32"] and source.startswith("the times measured in cpu fp32")
