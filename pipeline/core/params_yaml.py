"""params.yaml, read once into :class:`~pipeline.core.config.Params`: each value checked against its field's type,
every key required, unknown keys refused with the allowed ones named."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import Literal

import yaml

from pipeline.core.config import Params
from pipeline.core.errors import ConfigError, require

PARAMS_FILE = Path("params.yaml")


def _coerce(value, annotation, key: str):
    """Checks ``value`` against a field's type; ints are accepted where floats are expected."""
    origin = typing.get_origin(annotation)
    if dataclasses.is_dataclass(annotation):
        return _build(annotation, value, key)
    if origin is Literal:
        choices = typing.get_args(annotation)
        require(value in choices, key, f"must be one of {', '.join(choices)}, got {value!r}")
        return value
    if origin is list:
        require(isinstance(value, list), key, f"must be a list, got {value!r}")
        (item_type,) = typing.get_args(annotation)
        return [_coerce(item, item_type, f"{key}[{i}]") for i, item in enumerate(value)]
    if annotation is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        require(ok, key, f"must be a number, got {value!r}")
        return float(value)
    if annotation is int:
        require(isinstance(value, int) and not isinstance(value, bool), key, f"must be an integer, got {value!r}")
        return value
    if annotation is bool:
        require(isinstance(value, bool), key, f"must be true or false, got {value!r}")
        return value
    if annotation is str:
        require(isinstance(value, str), key, f"must be a string, got {value!r}")
        return value
    raise TypeError(f"unsupported field type {annotation} for {key}")  # a bug in this module, not a user error


def _build(cls, data, key: str):
    where = key or "the top level"
    require(isinstance(data, dict), where, f"must be a mapping of keys to values, got {data!r}")
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known, key=str)  # YAML reads bare on/off/yes/no keys as booleans
    if unknown:
        prefix = f"{key}." if key else ""
        raise ConfigError(
            f"params.yaml: unknown key(s) {[prefix + str(k) for k in unknown]} in {where}; "
            f"allowed keys are {sorted(known)}"
        )
    missing = [name for name in hints if name in known and name not in data]
    if missing:
        prefix = f"{key}." if key else ""
        raise ConfigError(
            f"params.yaml: {', '.join(prefix + name for name in missing)} missing in {where}; every key must be "
            "set there (the committed params.yaml has them all, with comments)"
        )
    values = {name: _coerce(value, hints[name], f"{key}.{name}" if key else name) for name, value in data.items()}
    return cls(**values)


def parse_params(data: dict) -> Params:
    """Builds and validates :class:`Params` from a parsed YAML mapping with every key."""
    params = _build(Params, data, "")
    params.validate()
    return params


def load_params(path: str | Path = PARAMS_FILE) -> Params:
    """Reads and validates ``params.yaml``.

    Raises:
        ConfigError: the file is missing, is not valid YAML, or has a bad key or value.
    """
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(
            f"{path} not found; run the stage from the repository root, where params.yaml lives"
        ) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        detail = " ".join(str(error).split())  # one line: YAML's own message spans several
        raise ConfigError(f"{path} is not valid YAML ({detail}); fix the syntax at the line shown") from None
    return parse_params(data if data is not None else {})


def flatten(params: Params) -> dict[str, str]:
    """All params as ``{"section.key": value}`` strings, for MLflow."""
    flat: dict[str, str] = {}

    def walk(prefix: str, value) -> None:
        if dataclasses.is_dataclass(value):
            for f in dataclasses.fields(value):
                walk(f"{prefix}.{f.name}" if prefix else f.name, getattr(value, f.name))
        else:
            flat[prefix] = str(value)

    walk("", params)
    return flat
