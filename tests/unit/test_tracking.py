"""pipeline.tracking: MLflow runs that never stop a stage."""

from __future__ import annotations

import re

import pytest
from helpers import raw_params

from pipeline.config import parse_params

# --- tracking --------------------------------------------------------------------------------


def test_tracking_uri_defaults_to_sqlite_under_dvc_root_and_env_overrides(tmp_path, monkeypatch):
    from pipeline.tracking import tracking_uri

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    assert tracking_uri() == f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://tracking.example:5000")
    assert tracking_uri() == "http://tracking.example:5000"


def test_stage_tracker_records_params_tags_and_metric_steps(tmp_path, monkeypatch):
    import mlflow

    from pipeline.tracking import stage_tracker

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))  # artifacts, if any, go under tmp_path
    params = parse_params(raw_params())
    with stage_tracker(params, "train_scratch", seed=2, arm="scratch") as tracker:
        tracker.log_metrics({"test_acc": 0.25}, step=1)
        tracker.log_metrics({"test_acc": 0.5}, step=2)
    client = mlflow.MlflowClient(uri)
    experiment = client.get_experiment_by_name(f"vit-{params.preset}")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == "train_scratch-seed2" and run.info.status == "FINISHED"
    assert run.data.params["train_scratch.offline.lr"] == str(params.train_scratch.offline.lr)
    assert run.data.tags["stage"] == "train_scratch" and run.data.tags["seed"] == "2"
    assert run.data.tags["arm"] == "scratch"
    assert re.fullmatch(r"[0-9a-f]{40}|unknown", run.data.tags["git_commit"])
    history = client.get_metric_history(run.info.run_id, "test_acc")
    assert sorted((m.step, m.value) for m in history) == [(1, 0.25), (2, 0.5)]
    assert "wall_time_s" in run.data.metrics


@pytest.mark.parametrize("store", ["sqlite-under-a-file", "http-closed-port"])
def test_tracker_warns_and_carries_on_when_mlflow_is_unreachable(tmp_path, monkeypatch, capsys, store):
    from pipeline.tracking import Tracker

    blocker = tmp_path / "a-file"
    blocker.write_text("")  # a directory cannot be made under a file, even by root
    uri = f"sqlite:///{blocker / 'x' / 'mlflow.db'}" if store.startswith("sqlite") else "http://127.0.0.1:9"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    with Tracker("vit-test", "run", {"stage": "x"}, {"a": "1"}) as tracker:
        assert tracker.client is None
        assert "warning: MLflow start failed" in capsys.readouterr().err
        tracker.log_metrics({"test_acc": 1.0}, step=1)
        tracker.log_artifact(blocker)
    assert capsys.readouterr().err == ""  # a no-op after the failure: no second attempt, no second warning
