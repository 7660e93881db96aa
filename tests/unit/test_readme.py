"""Every number the README reports comes from a committed file: each 0.xxx in it is a value (rounded to three
decimals) of a metrics file under metrics/ or a setting in params.yaml, so a rerun that changes a result
fails here until the README says the new number."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
NUMBER = re.compile(r"(?<![\d.])0\.\d{3}(?![\d])")


def leaves(tree) -> list[float]:
    if isinstance(tree, dict):
        return [v for value in tree.values() for v in leaves(value)]
    if isinstance(tree, list):
        return [v for value in tree for v in leaves(value)]
    return [float(tree)] if isinstance(tree, (int, float)) and not isinstance(tree, bool) else []


def committed_values() -> set[str]:
    values = [v for path in sorted((REPO / "metrics").rglob("*.json")) for v in leaves(json.loads(path.read_text()))]
    values += leaves(yaml.safe_load((REPO / "params.yaml").read_text()))
    return {f"{abs(v):.3f}" for v in values}  # a difference's sign is printed apart: "-0.069" reads "0.069"


def prose(text: str) -> str:
    """``text`` without its generated tables (tests/tools/test_report.py checks those against the metrics)."""
    return re.sub(r"<!-- generated: (\w+) -->\n.*?<!-- /generated: \1 -->", "", text, flags=re.DOTALL)


def test_every_three_decimal_number_in_the_readme_is_a_committed_value():
    reported = set()
    for name in ("README.md", "docs/results.md"):
        reported |= set(NUMBER.findall((REPO / name).read_text()))
    assert reported, "the README reports no result"
    missing = sorted(reported - committed_values())
    assert not missing, f"README numbers with no committed source under metrics/ or params.yaml: {missing}"


def test_the_prose_quotes_no_result_of_its_own():
    """Numbers outside the generated tables may only be settings (params.yaml): a result quoted by hand goes
    stale at the next rerun, so the prose cites the generated tables instead."""
    params = {f"{abs(v):.3f}" for v in leaves(yaml.safe_load((REPO / "params.yaml").read_text()))}
    for name in ("README.md", "docs/results.md"):
        quoted = set(NUMBER.findall(prose((REPO / name).read_text()))) - params
        assert not quoted, f"{name} quotes {sorted(quoted)} outside its generated tables"


def test_the_check_finds_numbers_and_rejects_an_invented_one():
    assert NUMBER.findall("0.524 ± 0.003, lr 0.0001, 10.123, (0.673)") == ["0.524", "0.003", "0.673"]
    headline = json.loads((REPO / "metrics/evaluate.json").read_text())["linear"]["test_acc"]["mean"]
    assert f"{headline:.3f}" in committed_values()
