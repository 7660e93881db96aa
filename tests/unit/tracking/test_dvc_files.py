"""pipeline.tracking.dvc_files: what dvc.yaml and dvc.lock say about a stage (its params, the prepared data's hash)."""

from __future__ import annotations

import yaml


def test_stage_params_are_the_stage_s_dvc_yaml_list_or_all_without_one(tmp_path):
    from pipeline.tracking.dvc_files import stage_params

    flat = {
        "preset": "offline",
        "seeds": "[0]",
        "backbone.lr": "0.1",
        "backbone.epochs": "4",
        "evaluate.batch_size": "8",
    }
    dvc_yaml = tmp_path / "dvc.yaml"
    dvc_yaml.write_text("stages:\n  backbone:\n    params: [preset, backbone]\n")
    assert stage_params(flat, "backbone", dvc_yaml) == {
        "preset": "offline",
        "backbone.lr": "0.1",
        "backbone.epochs": "4",
    }
    assert stage_params(flat, "no_such_stage", dvc_yaml) == flat
    assert stage_params(flat, "backbone", tmp_path / "missing.yaml") == flat


def test_the_data_digest_is_dvc_locks_md5_of_that_folder_or_unknown(tmp_path):
    from pipeline.tracking.dvc_files import data_digest

    lock = tmp_path / "dvc.lock"
    lock.write_text(yaml.safe_dump({"stages": {
        "download": {"outs": [{"path": "data/raw", "md5": "aaaa.dir"}]},
        "prepare": {"deps": [{"path": "data/raw", "md5": "bbbb.dir"}], "outs": [
            {"path": "data/manifest.csv", "md5": "cccc"}, {"path": "data/prepared", "md5": "dddd.dir"}]},
    }}))  # fmt: skip
    assert data_digest("data/prepared", lock) == "dddd.dir"  # the folder's own out, not another's or a dep's
    assert data_digest("data/raw", lock) == "aaaa.dir"
    assert data_digest("data/missing", lock) == "unknown"
    assert data_digest("data/prepared", tmp_path / "no.lock") == "unknown"
    lock.write_text("stages: [not, a, mapping\n")
    assert data_digest("data/prepared", lock) == "unknown"
