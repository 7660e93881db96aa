"""pipeline.core.params_yaml: params.yaml read into Params, every key required, unknown ones and mistyped values named
with the key; flatten for MLflow."""

from __future__ import annotations

import dataclasses
import re

import pytest
from helpers import ROOT, raw_params, with_value

from pipeline.core.errors import ConfigError
from pipeline.core.params_yaml import flatten, load_params, parse_params


@pytest.mark.parametrize(
    "dotted",
    [
        "seeds",
        "runtime.threads",
        "data_hunger.scratch.lrs",
        "linear_probe.paper.epochs",
        "validation.offline_per_class",
    ],
)
def test_a_missing_key_is_named_with_where_to_find_it(dotted):
    data = raw_params()
    *sections, last = dotted.split(".")
    node = data
    for section in sections:
        node = node[section]
    del node[last]
    with pytest.raises(ConfigError, match=rf"params.yaml: {re.escape(dotted)} missing.*committed params.yaml"):
        parse_params(data)


def test_an_empty_params_file_names_the_first_missing_keys(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text("")
    with pytest.raises(ConfigError, match="params.yaml: preset, seeds, runtime"):
        load_params(path)


@pytest.mark.parametrize(
    ("dotted", "shown"),
    [("colour", "colour"), ("train_scratch.offline.lrr", "train_scratch.offline.lrr"), ("runtime.gpu", "runtime.gpu")],
)
def test_unknown_key_names_the_full_key_and_the_allowed_keys(dotted, shown):
    with pytest.raises(ConfigError) as caught:
        parse_params(with_value(raw_params(), dotted, 1))
    message = str(caught.value)
    assert repr(shown) in message
    node = load_params(ROOT / "params.yaml")
    for part in dotted.split(".")[:-1]:
        node = getattr(node, part)
    allowed = [f.name for f in dataclasses.fields(node)]
    assert str(sorted(allowed)) in message


@pytest.mark.parametrize(
    ("dotted", "value"),
    [
        ("train_scratch.offline.lr", "fast"),
        ("train_scratch.offline.lr", True),  # YAML's true is a bool, not the number 1
        ("train_scratch.offline.epochs", 2.5),
        ("seeds", 3),
        ("seeds", [0, "one"]),
        ("offline.mirror", "yes"),
        ("offline.classes", "Coat"),
        ("runtime", "cpu"),
    ],
)
def test_mistyped_value_names_the_key(dotted, value):
    with pytest.raises(ConfigError, match=re.escape(dotted)):
        parse_params(with_value(raw_params(), dotted, value))


def test_unknown_non_string_key_beside_another_unknown_key_gives_config_error(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text("on: 1\ncolour: red\n")
    with pytest.raises(ConfigError, match="colour"):
        load_params(path)


def test_missing_params_file_names_the_path(tmp_path):
    path = tmp_path / "nowhere" / "params.yaml"
    with pytest.raises(ConfigError, match=re.escape(str(path))):
        load_params(path)


def test_invalid_yaml_names_the_path(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text("train_scratch:\n  lr: [0.1, 0.2\n")
    with pytest.raises(ConfigError, match=re.escape(str(path))):
        load_params(path)


def test_integer_is_accepted_where_a_float_is_expected():
    params = parse_params(with_value(raw_params(), "train_scratch.offline.lr", 1))
    assert params.train_scratch.offline.lr == 1.0
    assert isinstance(params.train_scratch.offline.lr, float)


def test_flatten_gives_dotted_string_keys_for_every_field():
    params = parse_params(with_value(raw_params(), "train_scratch.offline.lr", 0.125))
    flat = flatten(params)
    assert flat["train_scratch.offline.lr"] == "0.125"
    assert flat["preset"] == params.preset
    assert "seeds" in flat and "runtime.device" in flat and "paper.weights_sha256" in flat
    assert all(isinstance(v, str) for v in flat.values())
    assert "runtime" not in flat and "train_scratch" not in flat  # leaves only, never a whole section


def _committed_with(pattern: str, replacement: str) -> tuple[str, int]:
    """The committed params.yaml's text with the first match of ``pattern`` (a whole line) replaced; returns the
    text and the 1-based number of the line replaced."""
    text = (ROOT / "params.yaml").read_text()
    match = re.search(pattern, text, flags=re.MULTILINE)
    assert match, pattern
    return text[: match.start()] + replacement + text[match.end() :], text.count("\n", 0, match.start()) + 1


STRICT_CASES = {
    "key-twice": (r"^seeds: .*$", lambda line: f"{line}\nseeds: [7]", 1, ["seeds is given twice", "first at line"]),
    "tab": (r"^  threads: .*$", lambda line: "\t" + line.lstrip(), 0, ["holds a tab", "'threads'", "spaces"]),
    "exponent-without-dot": (r"^    lr: .*$", lambda _: "    lr: 1e-3", 0,
                             ["train_scratch.offline.lr must be a number", "'1e-3'", "YAML reads 1e-3 as a string"]),
    "octal": (r"^    epochs: .*$", lambda _: "    epochs: 010", 0,
              ["train_scratch.offline.epochs is 010", "integer 8", "plain decimal"]),
    "sexagesimal": (r"^    epochs: .*$", lambda _: "    epochs: 1:30", 0, ["is 1:30", "integer 90"]),
    "not-a-number": (r"^    lr: .*$", lambda _: "    lr: .nan", 0, ["train_scratch.offline.lr is .nan", "finite"]),
    "bare-no": (r"^  classes: .*$", lambda _: "  classes: [no, Coat, Shirt]", 0,
                ["offline.classes[0] must be a string, got False", "YAML reads a bare no as False", "quote it"]),
}  # fmt: skip


@pytest.mark.parametrize("case", STRICT_CASES)
def test_what_yaml_allows_but_a_person_would_not_mean_is_one_line_naming_the_key_and_its_line(tmp_path, case):
    """A key given twice (YAML keeps the last: ``seeds: [7]`` after the committed seeds ran seed 7 alone), a tab,
    or a plain value YAML reads as another type than it looks: refused, naming the key and the line it is on."""
    pattern, replace, offset, fragments = STRICT_CASES[case]
    text = (ROOT / "params.yaml").read_text()
    line = re.search(pattern, text, flags=re.MULTILINE)[0]
    edited, number = _committed_with(pattern, replace(line))
    path = tmp_path / "params.yaml"
    path.write_text(edited)
    with pytest.raises(ConfigError) as caught:
        load_params(path)
    message = str(caught.value)
    assert "\n" not in message and f"line {number + offset}" in message
    for fragment in fragments:
        assert fragment in message


def test_a_range_error_names_the_line_of_its_key(tmp_path):
    edited, number = _committed_with(r"^    epochs: .*$", "    epochs: -1")
    path = tmp_path / "params.yaml"
    path.write_text(edited)
    with pytest.raises(
        ConfigError, match=rf"train_scratch.offline.epochs must be at least 1, got -1 \(.*line {number}\)"
    ):
        load_params(path)


def test_the_committed_params_and_quoted_or_dotted_values_read_as_before(tmp_path):
    """What a person means reads as before: ``1.0e-3``, a quoted ``'no'`` for a word, ``yes`` for a switch."""
    committed = load_params(ROOT / "params.yaml")
    edited, _ = _committed_with(r"^    lr: .*$", "    lr: 1.0e-3")
    path = tmp_path / "params.yaml"
    path.write_text(edited)
    assert load_params(path).train_scratch.offline.lr == 0.001
    assert load_params(path).seeds == committed.seeds
