"""The package's layout: layers as folders, imports only downward, no circle, and unit tests that mirror it.

Each library module ``pipeline/<layer>/<m>.py`` has ``tests/unit/<layer>/test_<m>.py`` (a preset's module
``pipeline/data/presets/<p>.py`` has ``tests/unit/data/presets/test_<p>.py``); every unit test file names a module
or is one of the few that test across modules. The stages' and tools' own rules live in
tests/stages/test_dvc_yaml.py."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "pipeline"
UNIT = REPO / "tests" / "unit"
# The layers, lowest first (docs/pipeline.md draws them). A module imports from its own folder or from a lower
# layer, never from a higher one nor from a peer of its own rank.
LAYERS = {"core": 0, "data": 1, "tracking": 1, "models": 2, "train": 3, "results": 4, "pretrain": 5, "arms": 6,
          "stages": 7, "tools": 7}  # fmt: skip
# Unit test files of no one module: what they test spans the library.
ACROSS_MODULES = {
    "test_distributed.py": "training under torchrun: the loop, the runtime and files together",
    "test_readme.py": "the README's numbers against metrics/ and params.yaml",
    "test_doc_links.py": "the documents' links between sections and the long pages' contents",
    "test_grid_edges.py": "benchmarks/grid_edges.py against the committed point files, and its table in the report",
    "test_floor_check.py": "benchmarks/floor_check.py: the cells the plateau floor may decide",
    "test_precision_change.py": "benchmarks/precision_change.py: a rerun's and a fresh-seed replication's verdicts",
    "test_replication.py": "benchmarks/replication.py: a stopped replication's or rerun's files kept and restored",
    "test_pruning_pilot.py": "benchmarks/pruning_pilot.py: a sweep's choice replayed with a check inside its runs",
    "test_compute_accounting.py": "benchmarks/compute_accounting.py against the committed point files",
    "test_halving_replay.py": "benchmarks/halving_replay.py: successive halving replayed on the committed point files",
    "test_layout.py": "this file",
}


def library_modules() -> list[Path]:
    """The library's modules with code: every layer but the stages and tools (tests/stages, tests/tools)."""
    return sorted(
        path
        for path in PACKAGE.rglob("*.py")
        if path.relative_to(PACKAGE).parts[0] not in ("stages", "tools") and path.read_text().strip()
    )


def mirrored_test_file(module: Path) -> Path:
    """pipeline/core/config.py -> tests/unit/core/test_config.py; a package's own code, pipeline/data/presets/
    __init__.py -> tests/unit/data/test_presets.py."""
    relative = module.relative_to(PACKAGE)
    if relative.stem == "__init__":
        return UNIT / relative.parent.parent / f"test_{relative.parent.name}.py"
    return UNIT / relative.parent / f"test_{relative.stem}.py"


def imports_of(path: Path) -> set[str]:
    """The ``pipeline.*`` modules ``path`` imports, lazily or not, as dotted names (``from pipeline.x import m``
    counts as ``pipeline.x.m`` when ``m`` is a module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pipeline"):
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                found.add(candidate if module_file(candidate) else node.module)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("pipeline.")}
    return found


def module_file(dotted: str) -> Path | None:
    base = REPO / Path(*dotted.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def dotted_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    return {dotted_name(path): imports_of(path) for path in sorted(PACKAGE.rglob("*.py"))}


def layer(dotted: str) -> str | None:
    parts = dotted.split(".")
    return parts[1] if len(parts) > 2 else None  # pipeline.core.config -> core; pipeline.core -> no module


def climbing_imports(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for module, targets in graph.items():
        here = layer(module)
        for target in targets:
            there = layer(target)
            if here is None or there is None or there == here:
                continue
            if LAYERS[there] >= LAYERS[here]:
                bad.append(f"{module} -> {target}")
    return sorted(bad)


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every circle of imports, each once, as the path that closes it."""
    found, done = [], set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            found.append(path[path.index(module) :] + [module])
            return
        if module in done:
            return
        for target in sorted(graph.get(module, ())):
            visit(target, [*path, module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])
    return found


def test_pipeline_holds_only_its_layers():
    assert {path.name for path in PACKAGE.iterdir() if path.name != "__pycache__"} == {"__init__.py", *LAYERS}
    assert not (PACKAGE / "__init__.py").read_text().strip()


def test_imports_only_go_down_the_layers():
    assert climbing_imports(import_graph()) == []


def test_no_module_imports_itself_through_others():
    assert circles(import_graph()) == []


def test_the_graph_checks_catch_a_climb_and_a_circle():
    graph = {"pipeline.core.config": {"pipeline.models.vit"}, "pipeline.models.vit": {"pipeline.core.config"}}
    assert climbing_imports(graph) == ["pipeline.core.config -> pipeline.models.vit"]
    assert circles(graph) == [["pipeline.core.config", "pipeline.models.vit", "pipeline.core.config"]]
    assert imports_of(PACKAGE / "stages" / "sweep.py") >= {"pipeline.core.arm_registry", "pipeline.arms.protocol"}


def test_the_mirror_rule_names_the_files_the_layout_says():
    assert mirrored_test_file(PACKAGE / "models" / "vit.py") == UNIT / "models" / "test_vit.py"
    assert mirrored_test_file(PACKAGE / "data" / "presets" / "__init__.py") == UNIT / "data" / "test_presets.py"
    names = {path.relative_to(REPO).as_posix() for path in library_modules()}
    assert {"pipeline/models/vit.py", "pipeline/data/presets/__init__.py", "pipeline/arms/cnn.py"} <= names
    assert not {"pipeline/__init__.py", "pipeline/stages/sweep.py", "pipeline/core/__init__.py"} & names


def test_no_module_name_is_used_twice_in_the_package():
    names = [path.stem for path in PACKAGE.rglob("*.py") if path.stem != "__init__"]
    assert sorted({name for name in names if names.count(name) > 1}) == []


def test_every_library_module_has_its_unit_test_file():
    missing = [
        f"{path.relative_to(REPO)} -> {mirrored_test_file(path).relative_to(REPO)}"
        for path in library_modules()
        if not mirrored_test_file(path).is_file()
    ]
    assert missing == []


def test_every_unit_test_file_names_a_library_module_or_tests_across_modules():
    expected = {mirrored_test_file(path) for path in library_modules()}
    strays = sorted(
        str(path.relative_to(REPO))
        for path in UNIT.rglob("test_*.py")
        if path not in expected and not (path.parent == UNIT and path.name in ACROSS_MODULES)
    )
    assert strays == [], "name a unit test file after the module it tests, or list it in ACROSS_MODULES"
