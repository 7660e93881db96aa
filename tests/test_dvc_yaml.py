"""dvc.yaml is honest: every stage lists exactly the pipeline modules its command imports, so a code
change reruns the stages it affects and no others."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
STAGES = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]


def imported_modules(module: str) -> set[str]:
    """``module`` and every ``pipeline.*`` module it imports, transitively, as file paths."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        tree = ast.parse((REPO / "pipeline" / f"{name}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "pipeline":
                todo += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pipeline."):
                todo.append(node.module.split(".")[1])
            elif isinstance(node, ast.Import):
                todo += [a.name.split(".")[1] for a in node.names if a.name.startswith("pipeline.")]
    return {f"pipeline/{name}.py" for name in seen}


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_stage_deps_are_exactly_the_modules_its_command_imports(stage):
    spec = STAGES[stage]
    module = re.fullmatch(r"python -m pipeline\.(\w+)( .*)?", spec["cmd"]).group(1)
    listed = {dep for dep in spec["deps"] if dep.startswith("pipeline/")}
    assert listed == imported_modules(module)


def test_the_import_walk_follows_both_import_forms():
    assert imported_modules("sweep") >= {"pipeline/cnn.py", "pipeline/paths.py", "pipeline/model.py"}
    assert "pipeline/sweep.py" in imported_modules("ablation")
