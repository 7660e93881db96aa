"""Faults in params.yaml met by a stage (pipeline/core/config.py; issue 5's case 7): a bad value, invalid YAML, no
file."""

from __future__ import annotations

from fault_project import assert_fails, copy_of, in_parallel

PARAM_FAULTS = {
    "unknown-key": (
        {"train_scratch": {"offline": {"lrr": 0.1}}},
        ["unknown key(s) ['train_scratch.offline.lrr']", "allowed keys are", "'lr'"],
    ),
    "mistyped": (
        {"train_scratch": {"offline": {"batch_size": "eight"}}},
        ["train_scratch.offline.batch_size", "integer", "'eight'"],
    ),
    "negative-lr": (
        {"train_scratch": {"offline": {"lr": -0.1}}},
        ["train_scratch.offline.lr", "must be positive", "-0.1"],
    ),
    "batch-0": ({"linear_probe": {"offline": {"batch_size": 0}}}, ["linear_probe.offline.batch_size", "at least 1"]),
    "unknown-model": ({"paper": {"model": "B/15"}}, ["paper.model", "'B/15'", "'B/16'", "'tiny'"]),
    "unknown-preset": ({"preset": "online"}, ["preset", "offline, paper", "'online'"]),
    "bad-scheme": ({"paper": {"url": "ftp://example.invalid/a.zip"}}, ["paper.url", "https, http or file"]),
}


def test_bad_param_stops_the_stage_naming_the_key_and_the_allowed_values(project, tmp_path):
    copies = [copy_of(project, tmp_path / case, **sections) for case, (sections, _) in PARAM_FAULTS.items()]
    results = in_parallel([copy.start("train_scratch") for copy in copies])
    for result, (_, fragments) in zip(results, PARAM_FAULTS.values(), strict=True):
        assert_fails(result, "train_scratch", "params.yaml", *fragments)


def test_invalid_yaml_and_missing_params_file_stop_the_stage(project, unchanged):
    saved = (project.repo / "params.yaml").read_bytes()
    try:
        (project.repo / "params.yaml").write_text("train_scratch:\n  lr: [0.1\n")
        # YAML's own message spans several lines (the line, a caret under the column), so one_line=False.
        result = project.stage("train_scratch")
        assert_fails(result, "train_scratch", "params.yaml is not valid YAML", "line 2", one_line=False)
        (project.repo / "params.yaml").unlink()
        assert_fails(project.stage("train_scratch"), "train_scratch", "params.yaml not found", "repository root")
    finally:
        (project.repo / "params.yaml").write_bytes(saved)
