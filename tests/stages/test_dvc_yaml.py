"""dvc.yaml (and each opt-in study's, studies/*/dvc.yaml) is honest and the layout stays a library plus thin
stages: every stage lists exactly the pipeline modules its command imports (a folder where it imports every module
in it), so a code change reruns the stages it affects and no others; no stage or tool imports a stage; stage
modules stay short."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DVC_FILES = [REPO / "dvc.yaml", *sorted(REPO.glob("studies/*/dvc.yaml"))]  # the default pipeline and opt-in studies
STAGES = {name: spec for path in DVC_FILES for name, spec in yaml.safe_load(path.read_text())["stages"].items()}
STAGE_FILES = sorted((REPO / "pipeline" / "stages").glob("[!_]*.py"))
TOOL_FILES = sorted((REPO / "pipeline" / "tools").glob("[!_]*.py"))
LIBRARY_FILES = sorted(
    path for path in (REPO / "pipeline").rglob("*.py") if path.parent.name not in ("stages", "tools", "pipeline")
)
# Library functions whose job is the whole of params.yaml: parsing it and logging every value to MLflow.
TAKES_ALL_PARAMS = {"params_yaml.py": {"flatten"}, "tracker.py": {"stage_tracker"}}
STAGE_LINE_CAP = 100


def module_path(dotted: str) -> Path:
    """``pipeline.x.y`` -> pipeline/x/y.py (or the package's __init__.py)."""
    base = REPO / Path(*dotted.split("."))
    return base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"


def direct_imports(path: Path) -> set[str]:
    """Every ``pipeline.*`` module ``path`` imports, anywhere in the file (lazy imports too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "pipeline":
            found |= {f"pipeline.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pipeline."):
            found.add(node.module)
            # ``from pipeline.arms import linear`` imports the module pipeline/arms/linear.py too (and
            # ``from pipeline.data import presets`` the package pipeline/data/presets)
            folder = REPO / Path(*node.module.split("."))
            names = [alias.name for alias in node.names]
            found |= {f"{node.module}.{name}" for name in names
                      if (folder / f"{name}.py").is_file() or (folder / name / "__init__.py").is_file()}  # fmt: skip
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("pipeline.")}
    return found


# Modules that import others by name at run time (importlib), which no import statement shows, and the dict of
# dotted names they load from: the dataset presets' package loads the preset params.yaml names.
LOADED_BY_NAME = {"pipeline.data.presets": "PRESETS"}


def loaded_by_name(module: str) -> set[str]:
    """The modules ``module`` loads by name (``LOADED_BY_NAME``). Every preset's module counts, since the preset is
    a parameter: a stage runs either's code."""
    if module not in LOADED_BY_NAME:
        return set()
    for node in ast.walk(ast.parse(module_path(module).read_text())):
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == [LOADED_BY_NAME[module]]:
            return set(ast.literal_eval(node.value).values())
    raise AssertionError(f"{module} no longer defines {LOADED_BY_NAME[module]}: update LOADED_BY_NAME")


def imported_modules(module: str) -> set[str]:
    """``module`` and every ``pipeline.*`` module it imports, transitively, as file paths (no __init__.py)."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo += direct_imports(module_path(name)) | loaded_by_name(name)
    files = {module_path(name) for name in seen}
    return {str(path.relative_to(REPO)) for path in files if path.read_text().strip()}  # empty __init__s aside


def stage_arms(spec: dict) -> list[str]:
    """The arms a sweep stage runs: its command's first argument, comma-separated. The sweep imports an arm's
    module by name (pipeline.core.arm_registry.arm_module), so the walk cannot see it."""
    words = spec["cmd"].split()
    return words[3].split(",") if words[2] == "pipeline.stages.sweep" else []


def folder_modules(folder: str) -> set[str]:
    """The non-empty modules under a folder of the package, its subfolders' included."""
    return {str(path.relative_to(REPO)) for path in (REPO / folder).rglob("*.py") if path.read_text().strip()}


def listed_modules(deps: list[str]) -> set[str]:
    """A stage's pipeline/ deps as module files: a folder stands for every module under it."""
    files = set()
    for dep in (dep for dep in deps if dep.startswith("pipeline/")):
        files |= folder_modules(dep) if (REPO / dep).is_dir() else {dep}
    return files


def stage_imports(spec: dict) -> set[str]:
    module = re.fullmatch(r"python -m (pipeline\.stages\.\w+)( .*)?", spec["cmd"]).group(1)
    expected = imported_modules(module)
    for arm in stage_arms(spec):
        expected |= imported_modules(f"pipeline.arms.{arm}")
    return expected


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_stage_deps_are_exactly_the_modules_its_command_imports(stage):
    assert listed_modules(STAGES[stage]["deps"]) == stage_imports(STAGES[stage])


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_a_stage_that_imports_a_whole_folder_lists_the_folder(stage):
    """Folders keep dvc.yaml short, and a module added to a folder a stage imports whole needs no new line."""
    imported = stage_imports(STAGES[stage])
    folders = {str(path.relative_to(REPO)) for path in (REPO / "pipeline").rglob("*") if path.is_dir()}
    whole = {
        folder
        for folder in folders - {"pipeline/stages", "pipeline/tools"}
        if "__pycache__" not in folder and folder_modules(folder) and folder_modules(folder) <= imported
    }
    listed = [dep for dep in STAGES[stage]["deps"] if dep.startswith("pipeline/")]
    inside = [dep for dep in listed if any(dep.startswith(folder + "/") for folder in whole)]
    assert inside == [], f"list the folder, not its modules: {inside}"


def test_the_folder_rule_counts_a_folder_and_its_subfolders():
    assert folder_modules("pipeline/data") >= {"pipeline/data/images.py", "pipeline/data/presets/fashion_mnist.py"}
    listed = listed_modules(["data/prepared", "pipeline/core", "pipeline/models/vit.py"])
    assert listed == folder_modules("pipeline/core") | {"pipeline/models/vit.py"}


def test_an_arm_is_rerun_only_by_its_own_code():
    """Editing the small ResNet reruns only its curve points. The ResNet's code never imports the ViT: the ViT's
    file is among its points' deps only because ``precision: auto`` times the ViT's step (pipeline/train/runtime.py),
    and a change to that step can change the precision every stage runs in."""
    users = {name for name, spec in STAGES.items() if "pipeline/arms/cnn.py" in listed_modules(spec["deps"])}
    assert users == {"sweep_cnn"}
    for module in ("pipeline.arms.cnn", "pipeline.models.resnet"):
        assert "pipeline.models.vit" not in direct_imports(module_path(module))
    assert "pipeline.models.vit" in direct_imports(module_path("pipeline.train.runtime"))
    assert "pipeline/models/vit.py" not in listed_modules(STAGES["download"]["deps"])


def test_every_stage_module_is_a_dvc_stage_and_every_dvc_stage_runs_a_stage_module():
    commands = {re.fullmatch(r"python -m pipeline\.stages\.(\w+)( .*)?", s["cmd"]).group(1) for s in STAGES.values()}
    assert commands == {path.stem for path in STAGE_FILES}


@pytest.mark.parametrize("path", STAGE_FILES + TOOL_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_stage_or_tool_imports_a_stage_or_tool(path):
    assert not {m for m in direct_imports(path) if m.startswith(("pipeline.stages", "pipeline.tools"))}


@pytest.mark.parametrize("path", LIBRARY_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_library_functions_take_plain_values_or_their_own_section_never_all_params(path):
    """A stage reads params once and passes plain values or one section down (STYLE: one source, read once)."""
    takes_params = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            arguments = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
            typed = {a.arg: ast.unparse(a.annotation) if a.annotation else "" for a in arguments}
            if "Params" in typed.values() or typed.get("params", "dict") in ("", "Params"):
                takes_params.add(node.name)
    assert takes_params <= TAKES_ALL_PARAMS.get(path.name, set())


@pytest.mark.parametrize("path", LIBRARY_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_library_never_imports_stages_or_tools(path):
    assert not {m for m in direct_imports(path) if m.startswith(("pipeline.stages", "pipeline.tools"))}


@pytest.mark.parametrize("path", STAGE_FILES, ids=lambda p: p.name)
def test_stage_modules_stay_thin(path):
    lines = len(path.read_text().splitlines())
    assert lines < STAGE_LINE_CAP, f"{path.name} has {lines} lines; move library code into pipeline/"


def test_a_stage_that_loads_the_presets_depends_on_every_preset_module():
    """pipeline.data.presets imports its presets by name (importlib), so no import statement names them: a stage
    that prepares or reads data through them lists their code, or editing how Fashion-MNIST is prepared would
    rerun nothing."""
    presets = imported_modules("pipeline.data.presets")
    assert {"pipeline/data/presets/fashion_mnist.py", "pipeline/data/presets/image_folder.py"} <= presets
    assert "pipeline/data/presets" in STAGES["prepare"]["deps"]
    assert "pipeline/data/presets/fashion_mnist.py" in listed_modules(STAGES["download"]["deps"])


def test_the_import_walk_follows_every_import_form_and_subpackages():
    assert imported_modules("pipeline.arms.cnn") >= {"pipeline/arms/protocol.py", "pipeline/core/paths.py"}
    assert "pipeline/core/arm_registry.py" in imported_modules("pipeline.stages.sweep")
    assert "pipeline/stages/sweep.py" not in imported_modules("pipeline.stages.ablation")
    assert "pipeline/models/vit.py" not in imported_modules("pipeline.stages.download")


@pytest.mark.parametrize("stage", ["plot", "data_hunger", "pretraining_scale", "summary"])
def test_stages_that_only_draw_or_gather_never_depend_on_the_model(stage):
    """plot, data_hunger and pretraining_scale turn JSON into PNGs, summary gathers JSON: editing the ViT or the
    trainer must not rerun them, nor the downloader plot's and summary's. (data_hunger and pretraining_scale ask
    the preset what it provides, which loads the preset's module, and that module imports pipeline/data/fetch.py.)"""
    never = {"pipeline/models/vit.py", "pipeline/train/loop.py"}
    if stage in ("plot", "summary"):
        never.add("pipeline/data/fetch.py")
    assert not never & listed_modules(STAGES[stage]["deps"])


def test_make_synthetic_runs_every_item_of_the_study_each_pretraining_before_its_fine_tuning():
    """The Makefile lists the study's items itself (it runs each stage alone): the matrix's, none missing."""
    makefile = (REPO / "Makefile").read_text()
    items = re.search(r"^SYNTHETIC_ITEMS := (.*)$", makefile, re.MULTILINE).group(1).split()
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    arches = STAGES["synthetic_pretrain"]["matrix"]["arch"]
    assert sorted(items) == sorted(f"{arch}-{point}" for arch in arches for point in params["synthetic"]["points"])
    assert STAGES["synthetic_finetune"]["matrix"]["arch"] == arches
    assert "for stage in synthetic_pretrain synthetic_finetune;" in makefile


def test_the_synthetic_study_gathers_every_item_its_matrices_make():
    """synthetic_scale lists its inputs by name (a matrix's outputs cannot be named in a dep): one per item of
    synthetic_pretrain and synthetic_finetune at params.yaml's synthetic.points, and the curve's two ResNet points."""
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    items = [(arch, point) for arch in ("vit", "resnet") for point in params["synthetic"]["points"]]
    expected = {
        f"metrics/synthetic/{kind}_{arch}_{point}.json" for kind in ("pretrain", "finetune") for arch, point in items
    }
    listed = {dep for dep in STAGES["synthetic_scale"]["deps"] if dep.startswith("metrics/synthetic/")}
    assert listed == expected
    assert "metrics/data_hunger/cnn_${data_hunger.headline_point}.json" in STAGES["synthetic_scale"]["deps"]


def test_no_shell_true_anywhere_in_the_pipeline():
    offenders = [
        f"{path.relative_to(REPO)}:{n}"
        for path in sorted((REPO / "pipeline").rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), start=1)
        if re.search(r"shell\s*=\s*True|os\.system\(|os\.popen\(", line)
    ]
    assert offenders == []
