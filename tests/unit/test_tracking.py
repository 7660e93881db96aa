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


def test_runs_carry_source_version_user_host_and_pid_and_the_experiment_opens_on_its_runs(tmp_path, monkeypatch):
    import getpass
    import os
    import platform

    import mlflow

    from pipeline.tracking import Tracker

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    with Tracker("vit-test", "one", {"stage": "x"}, {}) as tracker:
        assert tracker.client is not None
    client = mlflow.MlflowClient(tracking_uri=uri)
    run = client.get_run(tracker.run_id)
    tags = run.data.tags
    assert tags["mlflow.user"] == getpass.getuser() and tags["mlflow.source.type"] == "LOCAL"
    assert tags["mlflow.source.git.commit"] == tags["git_commit"] and tags["mlflow.source.name"]
    assert (tags["host"], tags["pid"]) == (platform.node(), str(os.getpid()))
    experiment = client.get_experiment_by_name("vit-test")
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"


def test_a_run_whose_process_died_is_marked_killed_when_the_next_stage_starts(tmp_path, monkeypatch):
    import platform
    import subprocess
    import sys

    import mlflow

    from pipeline.tracking import Tracker

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    with Tracker("vit-test", "first", {}, {}):
        pass
    client = mlflow.MlflowClient(tracking_uri=uri)
    experiment_id = client.get_experiment_by_name("vit-test").experiment_id
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    orphan = client.create_run(
        experiment_id, run_name="killed", tags={"host": platform.node(), "pid": dead.stdout.strip()}
    )
    elsewhere = client.create_run(experiment_id, run_name="other host", tags={"host": "not-this-host", "pid": "1"})
    with Tracker("vit-test", "next", {}, {}):
        pass
    assert client.get_run(orphan.info.run_id).info.status == "KILLED"
    assert client.get_run(elsewhere.info.run_id).info.status == "RUNNING"  # another host's pids mean nothing here


def test_git_dirty_looks_at_sources_and_params_only(tmp_path, monkeypatch):
    import subprocess

    from pipeline.tracking import git_state

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    (tmp_path / "pipeline").mkdir()
    (tmp_path / "pipeline" / "a.py").write_text("x = 1\n")
    (tmp_path / "params.yaml").write_text("seeds: [0]\n")
    (tmp_path / "metrics.json").write_text("{}\n")
    git("init", "-q")
    git("-c", "user.name=t", "-c", "user.email=t@t", "add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "metrics.json").unlink()  # what `dvc repro` does to a stage's git-tracked outputs
    assert git_state()["git_dirty"] == "false"
    (tmp_path / "params.yaml").write_text("seeds: [1]\n")
    assert git_state()["git_dirty"] == "true"
