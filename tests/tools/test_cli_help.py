"""Every command line in pipeline/tools: ``--help`` prints its usage and does nothing else, and each has a
console script in pyproject.toml that names a function that exists."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest
from helpers import ROOT
from project_copy import clean_env

TOOLS = sorted(path.stem for path in (ROOT / "pipeline" / "tools").glob("[!_]*.py"))


def test_the_tools_are_the_documented_six():
    assert TOOLS == ["compare", "estimate", "plots", "predict", "progress", "report"]


@pytest.mark.parametrize("tool", TOOLS)
def test_help_prints_usage_and_touches_nothing(tool, tmp_path):
    """Run where there is no project at all: no params.yaml read, no MLflow store opened, no dvc run."""
    result = subprocess.run(
        [sys.executable, "-m", f"pipeline.tools.{tool}", "--help"],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: python -m pipeline.tools.{tool} ")
    assert "error" not in result.stderr and "finished" not in result.stderr  # stage_main's lines: main did not run
    assert list(tmp_path.iterdir()) == []


def test_every_tool_has_a_console_script_naming_its_main():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {f"vit-{tool}": f"pipeline.tools.{tool}:main" for tool in TOOLS}
    for target in scripts.values():
        module, function = target.split(":")
        assert callable(getattr(importlib.import_module(module), function))
