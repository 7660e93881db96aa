"""pipeline.core.arm_registry.REGISTRY is the one home of what the pipeline knows about an arm: dvc.yaml's sweep stages,
params.yaml's data_hunger sections and the .dvc/plots/ templates agree with it, and a malformed entry fails when
the registry is imported, not as a KeyError after the sweeps ran."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import typing
from pathlib import Path

import pytest
import yaml
from helpers import raw_params
from matplotlib.colors import is_color_like, to_hex

from pipeline.core import arm_registry as arms
from pipeline.core import config, paths
from pipeline.core.arm_registry import ARMS, DECAY_VARIANTS, REGISTRY, TABLE_ORDER, TRAINED, Arm
from pipeline.core.errors import ConfigError
from pipeline.core.params_yaml import parse_params

REPO = Path(__file__).resolve().parents[3]
STAGES = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]


def sweep_stage_arms() -> dict[str, str]:
    """{arm: the dvc.yaml stage whose items run it}, read from each sweep stage's command or matrix."""
    found = {}
    for name, spec in STAGES.items():
        match = re.fullmatch(r"python -m pipeline\.stages\.sweep (\S+) \$\{item\.point\}", spec["cmd"])
        if match:
            for arm in match.group(1).split(","):  # arms named together share one process
                assert arm not in found, f"{arm} is swept by both {found[arm]} and {name}"
                found[arm] = name
    return found


def test_every_arm_has_one_sweep_stage_and_it_is_the_registrys():
    assert sweep_stage_arms() == {name: arm.dvc_stage for name, arm in REGISTRY.items()}


@pytest.mark.parametrize("name", ARMS)
def test_each_sweep_stage_lists_its_arms_module_and_a_trained_arms_params(name):
    spec = STAGES[REGISTRY[name].dvc_stage]
    assert f"pipeline/arms/{name}.py" in spec["deps"]
    assert (f"data_hunger.{name}" in spec["params"]) == REGISTRY[name].trained
    arms = spec["cmd"].split()[3].split(",")
    point_files = [
        f"metrics/data_hunger/{arm}_${{item.point}}.json" for arm in arms
    ]  # pipeline.data.subsets.point_path
    assert [next(iter(out)) for out in spec["outs"]] == point_files


def test_params_yaml_has_one_optimiser_section_per_trained_arm_and_config_reads_each():
    sections = {key for key, value in raw_params()["data_hunger"].items() if isinstance(value, dict)}
    assert sections == set(TRAINED)
    fields = [f.name for f in config.dataclasses.fields(config.DataHungerConfig)]
    assert fields[-len(TRAINED) :] == list(TRAINED)


def test_a_trained_arm_without_its_params_section_fails_at_config_time_with_the_key():
    data = raw_params()
    del data["data_hunger"]["cnn"]
    with pytest.raises(ConfigError, match=r"data_hunger\.cnn missing in data_hunger"):
        parse_params(data)


def test_ablation_variants_accepted_by_config_are_the_registrys():
    assert typing.get_args(config.AblationVariant) == tuple(DECAY_VARIANTS)
    assert set(raw_params()["ablation"]["variants"]) <= set(DECAY_VARIANTS)
    assert all(is_color_like(v.colour) and v.label for v in DECAY_VARIANTS.values())


def test_the_curve_template_colours_every_arm_as_the_pngs_do():
    template = json.loads((REPO / ".dvc/plots/data_hunger.json").read_text())
    scale = template["encoding"]["color"]["scale"]
    assert scale["domain"] == [*ARMS, "pixels_logreg"]  # plots/data_hunger.csv's arm column (curve.curve_csv)
    assert scale["range"][: len(ARMS)] == [to_hex(REGISTRY[name].colour) for name in ARMS]


def test_the_history_template_colours_seed_000s_arms_as_the_pngs_do():
    template = json.loads((REPO / ".dvc/plots/arms.json").read_text())
    files = sorted(paths.HEADLINE_VIEWS)  # DVC colours the history files in file-name order: linear, scratch
    assert template["encoding"]["color"]["scale"]["range"] == [to_hex(REGISTRY[name].colour) for name in files]


@pytest.mark.parametrize("name", ARMS)
def test_each_arm_module_reads_its_view_from_the_registry(name):
    assert REGISTRY[name].view == arms.arm_module(name).VIEW
    assert is_color_like(REGISTRY[name].colour)


def test_the_table_order_holds_every_arm_once():
    assert sorted(TABLE_ORDER) == sorted(ARMS)
    assert tuple(name for name in ARMS if REGISTRY[name].trained) == TRAINED
    assert all(paths.HEADLINE_VIEWS[name] == REGISTRY[name].view for name in paths.HEADLINE_VIEWS)


@pytest.mark.parametrize(
    "fields",
    [
        {"label": "", "colour": "tab:red", "trained": True, "view": "scratch", "dvc_stage": "sweep_x"},
        {"label": "x", "colour": "", "trained": True, "view": "scratch", "dvc_stage": "sweep_x"},
        {"label": "x", "colour": "tab:red", "trained": True, "view": "pixels", "dvc_stage": "sweep_x"},
    ],
)
def test_a_malformed_entry_fails_when_it_is_made(fields):
    with pytest.raises(ValueError, match="an arm"):
        Arm(**fields)


def test_an_entry_without_a_label_fails_when_it_is_made():
    with pytest.raises(TypeError, match="label"):
        Arm(colour="tab:red", trained=True, view="scratch", dvc_stage="sweep_x")  # type: ignore[call-arg]


def test_the_registry_and_config_import_no_torch():
    """Plots, the report and params.yaml's validation read the registry; the arms' modules load on demand."""
    code = "import sys, pipeline.core.arm_registry, pipeline.core.config; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_decay_variants_change_only_the_optimiser_and_its_decay():
    changes = {name: (v.optimizer, v.weight_decay) for name, v in arms.DECAY_VARIANTS.items()}
    assert changes == {"adam_l2": ("adam", None), "adamw": ("adamw", None), "adam_no_decay": ("adam", 0.0)}
