"""pipeline.tracking.tracker: MLflow runs that never stop a stage."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from helpers import ROOT, raw_params
from project_copy import clean_env

from pipeline.core.params_yaml import parse_params

# --- tracking --------------------------------------------------------------------------------


def test_stage_tracker_records_params_tags_and_metric_steps(tmp_path, monkeypatch):
    import mlflow

    from pipeline.tracking.tracker import stage_tracker

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
    from pipeline.tracking.tracker import Tracker

    blocker = tmp_path / "a-file"
    blocker.write_text("")  # a directory cannot be made under a file, even by root
    uri = f"sqlite:///{blocker / 'x' / 'mlflow.db'}" if store.startswith("sqlite") else "http://127.0.0.1:9"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    with Tracker("vit-test", "run", {"stage": "x"}, {"a": "1"}) as tracker:
        with tracker.child("seed0") as child:
            child.log_metrics({"test_acc": 1.0}, step=1)
        tracker.log_metrics({"test_acc": 1.0}, step=1)
        tracker.log_artifact(blocker)
    assert tracker.client is None and child.client is None and child.failed
    # a no-op after the failure: one warning, no second attempt (nor in the child run)
    assert capsys.readouterr().err.count("warning: MLflow") == 1


def test_runs_carry_source_version_user_host_and_pid_and_the_experiment_opens_on_its_runs(tmp_path, monkeypatch):
    import getpass
    import os
    import platform

    import mlflow

    from pipeline.tracking.tracker import Tracker

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    with Tracker("vit-test", "one", {"stage": "x"}, {}) as tracker:
        pass
    assert tracker.client is not None
    client = mlflow.MlflowClient(tracking_uri=uri)
    run = client.get_run(tracker.run_id)
    tags = run.data.tags
    assert tags["mlflow.user"] == getpass.getuser() and tags["mlflow.source.type"] == "LOCAL"
    assert tags["mlflow.source.git.commit"] == tags["git_commit"] and tags["mlflow.source.name"]
    assert (tags["host"], tags["pid"]) == (platform.node(), str(os.getpid()))
    experiment = client.get_experiment_by_name("vit-test")
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"


def test_the_stage_trains_while_mlflow_starts_and_every_call_lands_in_order(tmp_path, monkeypatch):
    import threading

    import mlflow

    from pipeline.tracking import tracker as tracking

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    stage_went_on = threading.Event()
    git_state = tracking.git_state

    def git_state_once_the_stage_went_on():  # the start's first MLflow-side call waits for the stage's next line
        assert stage_went_on.wait(timeout=20), "the stage waited for MLflow's start"
        return git_state()

    monkeypatch.setattr(tracking, "git_state", git_state_once_the_stage_went_on)
    with tracking.Tracker("vit-test", "stage", {}, {}) as stage:
        stage_went_on.set()  # a synchronous start would still be waiting above, and then fail
        for seed in (0, 1):
            with stage.child(f"seed{seed}", {"seed": str(seed)}) as child:
                for step in range(1, 4):
                    child.log_metrics({"val_acc": seed + step / 10}, step=step)
    assert not stage.failed and not child.failed
    client = mlflow.MlflowClient(tracking_uri=uri)
    experiment_id = client.get_experiment_by_name("vit-test").experiment_id
    runs = {run.info.run_name: run for run in client.search_runs([experiment_id])}
    assert set(runs) == {"stage", "seed0", "seed1"} and all(r.info.status == "FINISHED" for r in runs.values())
    for seed in (0, 1):
        run = runs[f"seed{seed}"]
        assert run.data.tags["mlflow.parentRunId"] == stage.run_id
        history = client.get_metric_history(run.info.run_id, "val_acc")
        assert sorted((m.step, m.value) for m in history) == [(s, seed + s / 10) for s in range(1, 4)]


def test_a_value_that_is_no_number_warns_once_and_the_stage_goes_on(tmp_path, monkeypatch, capsys):
    from pipeline.tracking.tracker import Tracker

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    with Tracker("vit-test", "run", {}, {}) as tracker:
        tracker.log_metrics({"val_acc": "high"}, step=1)
        tracker.log_metrics({"val_acc": object()}, step=2)
        tracker.log_metrics({"val_acc": 0.5}, step=3)  # after the failure: not tried
    err = capsys.readouterr().err
    assert err.count("warning: MLflow") == 1 and "MLflow log_metrics failed (ValueError" in err
    assert tracker.failed and tracker.client is None


def test_a_run_whose_process_died_is_marked_killed_when_the_next_stage_starts(tmp_path, monkeypatch):
    import platform
    import subprocess
    import sys

    import mlflow

    from pipeline.tracking.tracker import Tracker

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


def test_a_stage_run_holds_one_child_per_seed_with_its_own_params_a_model_and_the_data(tmp_path, monkeypatch):
    import mlflow
    import torch
    import yaml
    from helpers import ROOT, tiny_vit

    from pipeline.tracking.tracker import stage_tracker

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dvc.yaml").write_text((ROOT / "dvc.yaml").read_text())
    (tmp_path / "dvc.lock").write_text(yaml.safe_dump({"stages": {"prepare": {"outs": [
        {"path": "data/prepared", "md5": "0123456789abcdef0123456789abcdef.dir"}]}}}))  # fmt: skip
    (tmp_path / "data/prepared").mkdir(parents=True)
    (tmp_path / "data/prepared/manifest.csv").write_text("split,path\n")
    (tmp_path / "history.csv").write_text("epoch,test_acc\n1,0.5\n")
    params = parse_params(raw_params())
    model = tiny_vit()
    with stage_tracker(params, "train_scratch", arm="scratch") as stage:
        for seed in (0, 1):
            with stage.child(f"train_scratch-seed{seed}", {"seed": str(seed)}, seed=str(seed)) as tracker:
                tracker.log_metrics({"test_acc": 0.5 + seed / 10}, step=1)
                if seed == 0:
                    tracker.log_model(model, torch.randn(2, 3, 32, 32))
        stage.log_artifact(tmp_path / "history.csv", "history")
    client = mlflow.MlflowClient(uri)
    experiment = client.get_experiment_by_name(f"vit-{params.preset}")
    runs = {run.info.run_name: run for run in client.search_runs([experiment.experiment_id])}
    parent = runs["train_scratch"]
    assert set(runs) == {"train_scratch", "train_scratch-seed0", "train_scratch-seed1"}
    for seed in (0, 1):
        child = runs[f"train_scratch-seed{seed}"]
        assert child.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert child.data.params == {"seed": str(seed)} and child.data.tags["arm"] == "scratch"
    # the parent logs the params dvc.yaml lists for the stage, and only those
    assert "train_scratch.offline.lr" in parent.data.params and "backbone.lr" not in parent.data.params
    assert "data_hunger.max_epochs" not in parent.data.params
    (dataset,) = parent.inputs.dataset_inputs
    assert dataset.dataset.digest == "0123456789abcdef0123456789abcdef.dir"[:36]
    assert [a.path for a in client.list_artifacts(parent.info.run_id, "history")] == ["history/history.csv"]
    model_uri = f"runs:/{runs['train_scratch-seed0'].info.run_id}/model"
    example = torch.randn(5, 3, 32, 32)  # another batch size than the logged example's
    torch.save(example, tmp_path / "example.pt")
    # loaded where `pipeline` cannot be imported: the model is a graph, not a pickled class of this project
    loader = f"""
import sys
class NoProject:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "pipeline":
            raise ImportError("the project is not on the path")
sys.meta_path.insert(0, NoProject())
import mlflow, torch
mlflow.set_tracking_uri({uri!r})
model = mlflow.pytorch.load_model({model_uri!r})
torch.save(model(torch.load({str(tmp_path / "example.pt")!r})), {str(tmp_path / "logits.pt")!r})
"""
    subprocess.run([sys.executable, "-c", loader], cwd=tmp_path, check=True, env=clean_env())
    assert torch.equal(torch.load(tmp_path / "logits.pt"), model.eval()(example))
    files = {a.path for a in client.list_artifacts(runs["train_scratch-seed0"].info.run_id, "model/data")}
    assert files == {"model/data/model.pt2"}  # the exported program only: no pickled model or pickle module
    signature = mlflow.models.get_model_info(f"runs:/{runs['train_scratch-seed0'].info.run_id}/model").signature
    assert signature.inputs.to_dict()[0]["tensor-spec"]["shape"] in ([-1, 3, 32, 32], (-1, 3, 32, 32))


def test_a_missing_value_is_left_out_and_does_not_stop_tracking(tmp_path, monkeypatch):
    """Step 0's validation record has no training loss: the other values are logged and tracking goes on."""
    import mlflow

    from pipeline.tracking.tracker import Tracker

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    with Tracker("vit-none", "run", {}, {}) as tracker:
        tracker.log_metrics({"train_loss": None, "val_acc": 0.5}, step=0)
        tracker.log_metrics({"val_acc": 0.75}, step=1)
        assert not tracker.failed
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert [m.value for m in client.get_metric_history(tracker.run_id, "val_acc")] == [0.5, 0.75]
    assert client.get_run(tracker.run_id).info.status == "FINISHED"


@pytest.mark.parametrize("server", ["refuses", "stalls"])
def test_a_dead_or_stalled_tracking_server_costs_seconds_and_one_warning(server, tmp_path, monkeypatch, capsys):
    """Without the user's own MLFLOW_HTTP_REQUEST_* settings, a server that refuses connections or accepts and
    never answers turns tracking off within 15 s (MLflow's defaults: minutes), and the stage goes on."""
    import socket
    import time

    from pipeline.tracking.mlflow_store import HTTP_DEFAULTS
    from pipeline.tracking.tracker import Tracker

    for key in HTTP_DEFAULTS:
        monkeypatch.delenv(key, raising=False)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    if server == "refuses":
        listener.close()
    else:
        listener.listen(8)  # connections queue in the backlog and are never read or answered
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{port}")
    monkeypatch.chdir(tmp_path)
    started = time.monotonic()
    try:
        with Tracker("vit-dead", "run", {}, {}) as tracker, tracker.child("seed", {"seed": "0"}) as child:
            child.log_metrics({"val_acc": 0.5}, step=1)
    finally:
        listener.close()
    assert time.monotonic() - started < 15
    assert tracker.failed and child.failed
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning: MLflow")]
    assert len(warnings) == 1 and "continuing without tracking" in warnings[0]


def test_a_stage_run_records_system_metrics(tmp_path, monkeypatch):
    import mlflow

    from pipeline.tracking.tracker import BACKGROUND, Tracker

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL", "0.2")
    import time

    with Tracker("vit-system", "run", {}, {}) as tracker:
        BACKGROUND.wait()  # the monitor starts with the run, in the background, while a stage trains
        time.sleep(1.0)
    metrics = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").get_run(tracker.run_id).data.metrics
    assert "system/cpu_utilization_percentage" in metrics and "system/system_memory_usage_megabytes" in metrics


# --- a locked SQLite store under many writers ---------------------------------------------------------


EIGHT_WRITERS = """
import sys
from pipeline.core.logs import setup_logging
from pipeline.tracking.tracker import Tracker

setup_logging()  # as in a stage process: a tracking failure prints "warning: MLflow ..."

with Tracker("vit-contended", f"writer{sys.argv[1]}", {"stage": "x"}, {"n": sys.argv[1]}) as tracker:
    for step in range(1, 6):
        tracker.log_metrics({"val_acc": step / 10}, step=step)
print("done", flush=True)
"""


@pytest.mark.e2e
def test_eight_writers_behind_a_30_s_lock_record_every_run_and_metric_and_leave_none_running(tmp_path):
    """A writer holds mlflow.db for 30 s (SQLite's 5 s wait per attempt and the old backoff gave up after ~23 s)
    while eight tracking processes start: every run ends FINISHED with all its metrics, none is left RUNNING or
    marked KILLED, and nobody warns."""
    import sqlite3
    import subprocess
    import sys
    import time

    import mlflow
    from project_copy import clean_env

    from pipeline.tracking.tracker import Tracker

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {**clean_env(), "MLFLOW_TRACKING_URI": uri, "DVC_ROOT": str(tmp_path), "PIPELINE_SYSTEM_METRICS": "0",
           "PYTHONPATH": str(__import__("pathlib").Path(__file__).resolve().parents[3])}  # fmt: skip
    with pytest.MonkeyPatch.context() as patch:  # the store's tables exist before the writers meet the lock
        patch.setenv("MLFLOW_TRACKING_URI", uri)
        patch.setenv("PIPELINE_SYSTEM_METRICS", "0")
        with Tracker("vit-contended", "setup", {}, {}):
            pass
    holder = sqlite3.connect(tmp_path / "mlflow.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", EIGHT_WRITERS, str(n)],
            env=env,
            cwd=tmp_path,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )  # fmt: skip
        for n in range(8)
    ]
    try:
        time.sleep(30)
    finally:
        holder.rollback()
        holder.close()
    results = [writer.communicate(timeout=600) for writer in writers]
    assert all(out == "done\n" and "warning: MLflow" not in err for out, err in results), results
    client = mlflow.MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("vit-contended").experiment_id])
    writers_runs = [r for r in runs if r.info.run_name.startswith("writer")]
    assert sorted(r.info.run_name for r in writers_runs) == [f"writer{n}" for n in range(8)]
    assert {r.info.status for r in runs} == {"FINISHED"}  # none RUNNING, none KILLED
    assert all(len(client.get_metric_history(r.info.run_id, "val_acc")) == 5 for r in writers_runs)


TRACK_TWICE = """
import sys
from pipeline.core.logs import setup_logging
from pipeline.tracking.tracker import Tracker

setup_logging()

for i in range(2):
    with Tracker("vit-parallel", f"writer{sys.argv[1]}-{i}", {"stage": "x"}, {"a": sys.argv[1]}) as tracker:
        for step in range(1, 4):
            tracker.log_metrics({"test_acc": step / 4}, step=step)
"""


def test_parallel_writers_on_a_new_sqlite_store_record_every_run(tmp_path):
    """Two processes creating MLflow's tables at once used to corrupt the schema and lose runs silently."""
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {**clean_env(), "MLFLOW_TRACKING_URI": uri, "DVC_ROOT": str(tmp_path), "PYTHONPATH": str(ROOT)}
    writers = [
        subprocess.Popen([sys.executable, "-c", TRACK_TWICE, str(n)], env=env, stderr=subprocess.PIPE, text=True)
        for n in (1, 2)
    ]
    errors = [writer.communicate(timeout=300)[1] for writer in writers]
    assert all("warning: MLflow" not in error for error in errors), errors
    client = mlflow.MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("vit-parallel").experiment_id])
    assert sorted(r.info.run_name for r in runs) == ["writer1-0", "writer1-1", "writer2-0", "writer2-1"]
    assert all(len(client.get_metric_history(r.info.run_id, "test_acc")) == 3 for r in runs)
