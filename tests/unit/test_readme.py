"""Every number the README reports comes from a committed file, by the key it comes from: results appear only
inside the generated tables (tests/tools/test_report.py regenerates them from metrics/ and fails on any
difference), and the prose around them may quote settings of params.yaml only."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
NUMBER = re.compile(r"(?<![\d.])0\.\d{3}(?![\d])")
DOCUMENTS = ("README.md", "docs/results.md", "docs/reproducibility.md")


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
