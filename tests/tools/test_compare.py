"""Tool compare: every MLflow run in one table, with the seed mean and std."""

from __future__ import annotations

import pandas as pd
import pytest
from tiny_project import SEEDS, run_cli

from pipeline.core.errors import UserError
from pipeline.core.params_yaml import flatten, load_params
from pipeline.tools import compare
from pipeline.tracking.tracker import Tracker

# --- compare ---------------------------------------------------------------------------------


def test_compare_tables_every_run_and_the_seed_mean_and_std(project, monkeypatch, capsys):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{project / 'mlflow.db'}")
    monkeypatch.setenv("DVC_EXP_NAME", "lr-sweep")
    params = load_params()
    tags = {"stage": "train_scratch", "preset": "offline", "arm": "scratch"}
    with Tracker("vit-offline", "train_scratch", tags, flatten(params)) as stage:  # as the stages log: seeds nested
        for seed, accuracy in zip(SEEDS, (0.5, 0.7), strict=True):
            with stage.child(f"train_scratch-seed{seed}", {"seed": str(seed)}, seed=str(seed)) as tracker:
                tracker.log_metrics({"test_acc": 0.1}, step=1)
                tracker.log_metrics({"final_test_acc": accuracy})
    assert stage.client is not None and tracker.client is not None  # the runs were made (in the background)
    status, out, _ = run_cli(compare, monkeypatch, capsys)
    assert status == 0
    table = pd.read_csv(project / "reports" / "compare.csv")
    assert list(table["run"]) == ["train_scratch-seed0", "train_scratch-seed1"]
    assert list(table["test_acc"]) == [0.5, 0.7]
    assert set(table["dvc_experiment"]) == {"lr-sweep"} and set(table["arm"]) == {"scratch"}
    assert list(table["lr"]) == [params.train_scratch.offline.lr] * 2  # the stage run's param, inherited
    assert (table["wall_time_s"] >= 0).all()
    report = (project / "reports" / "compare.md").read_text()
    assert "0.6000 ± 0.1414" in report and "| train_scratch | scratch |" in report
    assert report in out


def test_compare_without_a_store_or_runs_says_so_in_one_line(project, monkeypatch, capsys):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("DVC_ROOT", raising=False)
    status, _, err = run_cli(compare, monkeypatch, capsys)
    assert status == 1 and "no MLflow store" in err and "dvc repro" in err
    assert not (project / "mlflow.db").exists()  # reading must not create an empty store

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{project / 'other.db'}")
    with Tracker("vit-paper", "x", {}, {}):  # a store that holds only another preset's experiment
        pass
    capsys.readouterr()  # MLflow's own log lines from creating that store
    status, _, err = run_cli(compare, monkeypatch, capsys)
    assert status == 1 and "no experiment 'vit-offline'" in err
    assert len(err.strip().splitlines()) == 1


# --- the runs page that make ui prints -------------------------------------------------------


def test_ui_prints_the_experiment_s_runs_page_and_writes_nothing(project, monkeypatch, capsys):
    from mlflow import MlflowClient

    uri = f"sqlite:///{project / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    client = MlflowClient(tracking_uri=uri)
    client.create_experiment("vit-paper")  # another preset's experiment first: the ids differ
    experiment_id = client.create_experiment("vit-offline")
    page = f"http://127.0.0.1:5000/#/experiments/{experiment_id}/runs?workflowType=machine_learning"
    assert compare.runs_page(uri, "vit-offline") == page
    capsys.readouterr()  # MLflow's own log lines from creating the store
    status, out, _ = run_cli(compare, monkeypatch, capsys, "--ui")
    assert status == 0 and out == f"compare: the runs of vit-offline in mlflow ui: {page}\n"
    assert not (project / "reports").exists()
    with pytest.raises(UserError, match="has no experiment 'vit-other'"):
        compare.runs_page(uri, "vit-other")


def test_ui_without_a_store_says_to_run_the_pipeline_first_and_creates_none(tmp_path):
    with pytest.raises(UserError, match=r"no MLflow store at .*none\.db; run `dvc repro`"):
        compare.runs_page(f"sqlite:///{tmp_path / 'none.db'}", "vit-offline")
    assert list(tmp_path.iterdir()) == []
