"""params.yaml, read once into :class:`~pipeline.core.config.Params`: each value checked against its field's type,
every key required, unknown keys refused with the allowed ones named."""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path
from typing import Literal

import yaml

from pipeline.core.config import Params
from pipeline.core.errors import ConfigError, require

PARAMS_FILE = Path("params.yaml")


# Plain scalars YAML 1.1 reads as something a person rarely means: octal and sexagesimal integers, and
# not-a-number or infinite floats. Each is refused with what YAML made of it.
_SURPRISING_INTS = re.compile(r"[-+]?(0[0-7_]+|0b[01_]+|0x[0-9a-fA-F_]+|[1-9][0-9_]*(:[0-5]?[0-9])+)$")
_NOT_FINITE = re.compile(r"[-+]?\.(inf|Inf|INF|nan|NaN|NAN)$")
# A number YAML 1.1 leaves a string: an exponent without a dot (1e-3) or an explicit 0o prefix.
_NUMBER_AS_STRING = re.compile(r"[-+]?([0-9][0-9_]*)(e[-+]?[0-9]+)$|[-+]?0o[0-7]+$", re.IGNORECASE)
_BOOLEAN_WORDS = re.compile(r"(y|Y|yes|Yes|YES|n|N|no|No|NO|on|On|ON|off|Off|OFF)$")


@dataclasses.dataclass(frozen=True)
class _Source:
    """Where each dotted key (``seeds[1]`` for list items) is written in params.yaml, and a hint for a value
    that YAML read as another type than it looks."""

    lines: dict[str, int]
    hints: dict[str, str]


def _read_source(text: str, path: Path) -> _Source:
    """Walks the YAML node tree: refuses a tab, a key given twice and the surprising scalars above."""
    for number, line in enumerate(text.splitlines(), start=1):
        if "\t" in line.split("#")[0]:
            raise ConfigError(
                f"{path} line {number} holds a tab (at {line.split(':')[0].strip()!r}); YAML indents and "
                "separates with spaces only: replace the tab with spaces"
            )
    source = _Source({}, {})

    def walk(node: yaml.Node, key: str) -> None:
        if key:
            source.lines.setdefault(key, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            seen: dict[str, int] = {}
            for key_node, value_node in node.value:
                name, line = str(key_node.value), key_node.start_mark.line + 1
                dotted = f"{key}.{name}" if key else name
                if name in seen:
                    raise ConfigError(
                        f"{path} line {line}: {dotted} is given twice (first at line {seen[name]}); YAML keeps "
                        "only the last silently: delete one of them"
                    )
                seen[name] = line
                walk(value_node, dotted)
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                walk(item, f"{key}[{index}]")
        elif isinstance(node, yaml.ScalarNode) and node.style is None:  # plain, unquoted
            _check_plain_scalar(node.value, key, node.start_mark.line + 1, path, source)

    walk(yaml.compose(text, Loader=yaml.SafeLoader) or yaml.MappingNode("tag:yaml.org,2002:map", []), "")
    return source


def _check_plain_scalar(raw: str, key: str, line: int, path: Path, source: _Source) -> None:
    if _SURPRISING_INTS.match(raw):
        meant = yaml.safe_load(raw)
        raise ConfigError(
            f"{path} line {line}: {key} is {raw}, which YAML reads as the integer {meant}; write the number "
            "you mean in plain decimal"
        )
    if _NOT_FINITE.match(raw):
        raise ConfigError(f"{path} line {line}: {key} is {raw}, which YAML reads as {yaml.safe_load(raw)}; "
                          "every number in params.yaml must be finite")  # fmt: skip
    if _NUMBER_AS_STRING.match(raw):
        source.hints[key] = f"YAML reads {raw} as a string, not a number: write it with a dot, e.g. 1.0e-3"
    elif _BOOLEAN_WORDS.match(raw):
        source.hints[key] = f"YAML reads a bare {raw} as {yaml.safe_load(raw)}: quote it ('{raw}') for the word"


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
            f"allowed keys are {sorted(known)}",
            prefix + str(unknown[0]),
        )
    missing = [name for name in hints if name in known and name not in data]
    if missing:
        prefix = f"{key}." if key else ""
        raise ConfigError(
            f"params.yaml: {', '.join(prefix + name for name in missing)} missing in {where}; every key must be "
            "set there (the committed params.yaml has them all, with comments)",
            key or None,
        )
    values = {name: _coerce(value, hints[name], f"{key}.{name}" if key else name) for name, value in data.items()}
    return cls(**values)


def parse_params(data: dict) -> Params:
    """Builds and validates :class:`Params` from a parsed YAML mapping with every key."""
    params = _build(Params, data, "")
    params.validate()
    return params


def load_params(path: str | Path = PARAMS_FILE) -> Params:
    """Reads and validates ``params.yaml``, strictly: a tab, a key given twice, or a plain value YAML reads as
    another type than it looks (``010`` as 8, ``1e-3`` as a string, ``no`` as false) is refused, and every
    error names the line of its key.

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
        source = _read_source(text, path)
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        detail = " ".join(str(error).split())  # one line: YAML's own message spans several
        raise ConfigError(f"{path} is not valid YAML ({detail}); fix the syntax at the line shown") from None
    try:
        return parse_params(data if data is not None else {})
    except ConfigError as error:
        raise _located(error, source, path) from None


def _located(error: ConfigError, source: _Source, path: Path) -> ConfigError:
    """``error`` with the line its key (or, for a missing key, its section) is written on, and YAML's reading."""
    key = error.key
    if key is None:
        return error
    hint = source.hints.get(key)
    candidate = key
    while candidate and candidate not in source.lines:
        candidate = candidate.rpartition(".")[0]
    where = f" ({path} line {source.lines[candidate]})" if candidate else ""
    return ConfigError(f"{error}{where}{'; ' + hint if hint else ''}", key)


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
