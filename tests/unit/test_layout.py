"""The unit tests mirror the library: every module ``pipeline/<m>.py`` has ``tests/unit/test_<m>.py``, every arm
``pipeline/arms/<a>.py`` has ``tests/unit/test_arms_<a>.py`` (the registry, ``pipeline/arms/__init__.py``, has
``test_arms.py``), and every unit test file names a module or is one of the few that test across modules. The
stages' and tools' layout rules live in tests/stages/test_dvc_yaml.py."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "tests" / "unit"
# Unit test files of no one module: what they test spans the library.
ACROSS_MODULES = {
    "test_distributed.py": "training under torchrun: engine, runtime and files together",
    "test_readme.py": "the README's numbers against metrics/ and params.yaml",
    "test_grid_edges.py": "benchmarks/grid_edges.py against the committed point files, and its table in the report",
    "test_layout.py": "this file",
}


def mirrored_test_file(module: Path) -> str:
    """pipeline/x.py -> test_x.py; pipeline/arms/a.py -> test_arms_a.py; pipeline/arms/__init__.py -> test_arms.py."""
    parts = module.relative_to(REPO / "pipeline").with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return "test_" + "_".join(parts) + ".py"


def library_modules() -> list[Path]:
    """The library: pipeline/ and pipeline/arms/, with the arms' registry; not the empty package file, nor
    stages and tools (tests/stages and tests/tools)."""
    modules = sorted((REPO / "pipeline").glob("*.py")) + sorted((REPO / "pipeline" / "arms").glob("*.py"))
    return [path for path in modules if path.read_text().strip()]


def test_the_mirror_rule_names_the_files_the_layout_says():
    assert mirrored_test_file(REPO / "pipeline" / "model.py") == "test_model.py"
    assert mirrored_test_file(REPO / "pipeline" / "arms" / "cnn.py") == "test_arms_cnn.py"
    assert mirrored_test_file(REPO / "pipeline" / "arms" / "__init__.py") == "test_arms.py"
    names = {path.relative_to(REPO).as_posix() for path in library_modules()}
    assert {"pipeline/model.py", "pipeline/arms/__init__.py", "pipeline/arms/cnn.py"} <= names
    assert not {"pipeline/__init__.py", "pipeline/stages/sweep.py"} & names


def test_every_library_module_has_its_unit_test_file():
    missing = [
        f"{path.relative_to(REPO)} -> tests/unit/{mirrored_test_file(path)}"
        for path in library_modules()
        if not (UNIT / mirrored_test_file(path)).is_file()
    ]
    assert missing == []


def test_every_unit_test_file_names_a_library_module_or_tests_across_modules():
    expected = {mirrored_test_file(path) for path in library_modules()}
    strays = sorted(path.name for path in UNIT.glob("test_*.py") if path.name not in expected | set(ACROSS_MODULES))
    assert strays == [], "name a unit test file after the module it tests, or list it in ACROSS_MODULES"
