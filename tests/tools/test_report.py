"""The README's results table is generated from metrics/evaluate.json."""

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_fill_replaces_only_the_named_blocks_and_refuses_an_unknown_name():
    import pytest

    from pipeline.core.errors import UserError
    from pipeline.tools.report import fill

    text = "intro\n<!-- generated: curve -->\nold table\n<!-- /generated: curve -->\nafter 0.123\n"
    assert fill(text, {"curve": "new table"}) == text.replace("old table", "new table")
    with pytest.raises(UserError, match="unknown generated table 'curve'"):
        fill(text, {"headline": "x"})
    empty = "<!-- generated: curve -->\n<!-- /generated: curve -->\n"  # a new document's markers
    assert fill(empty, {"curve": "table"}) == "<!-- generated: curve -->\ntable\n<!-- /generated: curve -->\n"


def test_the_committed_readme_and_docs_tables_are_what_the_committed_metrics_give(monkeypatch):
    """`make results-write` output, checked: a rerun that changes a metric fails here until the tables follow."""
    import os

    from pipeline.tools.report import DOCUMENTS, MARKER, fill, generated_blocks

    os.chdir(REPO)
    blocks = generated_blocks()
    names = set()
    for document in DOCUMENTS:
        text = (REPO / document).read_text()
        names |= {match.group(2) for match in MARKER.finditer(text)}
        assert fill(text, blocks) == text, f"{document}: run `make results-write`"
    assert names == set(blocks)  # every table is shown somewhere


def test_the_committed_second_run_comparisons_are_what_their_point_files_give():
    """``metrics/precision_change*.json`` are rewritten by hand after a second run's files change: a file left
    stale (a point file replaced, the comparison not rerun) would put old verdicts in docs/reproducibility.md."""
    for name in (
        "precision_change.json",
        "precision_change_zen4.json",
        "run_before_accuracy_rule/replication/comparison.json",
        "replication/comparison.json",
        "run_before_accuracy_rule/rerun_cpu/comparison.json",
        "rerun_cpu/comparison.json",
        "run_before_issue37/rerun_against_it.json",
        "run_before_accuracy_rule/adopted_against_it.json",
    ):
        committed = json.loads((REPO / "metrics" / name).read_text())
        result = subprocess.run(
            [sys.executable, "benchmarks/precision_change.py", committed["other_source"],
             committed["reference_source"]],
            cwd=REPO, capture_output=True, text=True, timeout=120, check=True,
        )  # fmt: skip
        assert json.loads(result.stdout) == committed, f"rerun: python benchmarks/precision_change.py ... > {name}"


def test_a_report_killed_between_two_documents_leaves_each_whole_and_a_rerun_converges(tmp_path, monkeypatch):
    """`make results-write` stopped after its first document (SIGKILL, a lost machine): each document is its old
    or its new text, never a part of one, and the next run finishes the rest."""
    import shutil

    import pytest

    from pipeline.core import files
    from pipeline.tools import report

    for folder in ("metrics", "docs"):
        shutil.copytree(REPO / folder, tmp_path / folder)
    for name in ("README.md", "params.yaml"):
        shutil.copy(REPO / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    new = {document: Path(document).read_text() for document in report.DOCUMENTS}
    old = {document: report.MARKER.sub(lambda m: m.group(0).replace(m.group(3), "stale\n"), text)
           for document, text in new.items()}  # fmt: skip
    assert all(old[document] != new[document] for document in report.DOCUMENTS)
    for document, text in old.items():
        Path(document).write_text(text)

    class Killed(BaseException):
        pass

    written = []

    def write_then_die(path, text):
        if written:
            raise Killed
        files.write_text(path, text)
        written.append(str(path))

    monkeypatch.setattr(report, "write_text", write_then_die)
    monkeypatch.setattr(sys, "argv", ["report", "--write"])
    with pytest.raises(Killed):
        report.main()
    assert [Path(document).read_text() for document in report.DOCUMENTS] == [
        new[document] if document in written else old[document] for document in report.DOCUMENTS
    ]
    monkeypatch.setattr(report, "write_text", files.write_text)
    report.main()
    assert {document: Path(document).read_text() for document in report.DOCUMENTS} == new
    monkeypatch.setattr(sys, "argv", ["report", "--check"])
    report.main()  # up to date
