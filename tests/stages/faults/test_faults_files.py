"""Faults of the atomic writes (pipeline/core/files.py; issue 5's case 12): a disk that fills while writing."""

from __future__ import annotations

from fault_project import assert_fails


def test_disk_full_while_writing_keeps_the_previous_output(project, unchanged):
    metrics = project.repo / "metrics"
    before = sorted(p.name for p in metrics.iterdir())
    result = project.stage("evaluate", fault="disk-full:evaluate.json")
    assert_fails(result, "evaluate", "No space left on device", "free disk space", "earlier results are intact")
    assert sorted(p.name for p in metrics.iterdir()) == before  # no temporary file left behind
