"""pipeline.data.presets: one interface for every dataset preset, and a registry that matches params.yaml's."""

from __future__ import annotations

import ast
import typing
from pathlib import Path

import pytest

from pipeline.core.config import Params
from pipeline.data import presets

PACKAGE = Path(__file__).resolve().parents[3] / "pipeline"


def test_every_preset_config_accepts_is_registered_and_named_like_its_params_section():
    choices = typing.get_args(typing.get_type_hints(Params)["preset"])
    assert set(choices) == set(presets.PRESETS)
    for name in choices:
        preset = presets.get(name)
        assert preset.name == name and name in typing.get_type_hints(Params)  # its section: Params.<name>


def test_an_unknown_preset_names_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown preset 'imagenet'; choose one of \['offline', 'paper'\]"):
        presets.get("imagenet")


def test_the_presets_differ_where_the_pipeline_asks_them():
    offline, paper = presets.get("offline"), presets.get("paper")
    assert offline.has_pool and not paper.has_pool  # only offline pretrains its backbone here
    assert offline.sizes_are_counts and not paper.sizes_are_counts
    assert paper.pretrained_view_crops and not offline.pretrained_view_crops
    assert offline.training_file("scratch") == offline.training_file("pretrained")  # one file for both views
    assert paper.training_file("scratch") != paper.training_file("pretrained")


def test_no_code_outside_the_presets_and_config_compares_a_preset_name():
    """A new preset then means its module, its params section and its registry entry, not edits all over."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith("data/presets/") or relative == "core/config.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare) and any(
                isinstance(side, ast.Constant) and side.value in presets.PRESETS
                for side in (node.left, *node.comparators)
            ):
                offenders.append(f"{relative}:{node.lineno}")
    assert offenders == []
