"""Faults of MLflow tracking (pipeline/tracking/tracker.py): a locked, read-only or unreachable store (issue 5's case
10), and two queued experiments in parallel sharing the SQLite store (15)."""

from __future__ import annotations

import re
import shutil
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
import torch
from fault_project import Project, copy_of, finish, in_parallel
from project_copy import copy_project, set_params


def assert_training_outputs_complete(repo: Path) -> None:
    assert torch.load(repo / "models/scratch/seed_0.pt", weights_only=True)["heads.head.weight"].shape[0] == 3
    assert sorted(p.name for p in (repo / "models/scratch").iterdir()) == ["model.json", "seed_0.pt"]
    for path in ("plots/history/scratch.csv", "plots/history/scratch_seeds.csv"):
        assert len((repo / path).read_text().splitlines()) == 1 + 2  # header + one row per epoch


PASSWORD, TOKEN = "pa55-w0rd-1", "tok-0123456789"


def test_mlflow_failure_warns_and_the_stage_finishes_with_complete_outputs(project, tmp_path):
    (tmp_path / "a-file").write_text("")  # no folder can be made under a file, even by root
    locked = tmp_path / "locked.db"
    shutil.copy(project.env["MLFLOW_TRACKING_URI"].removeprefix("sqlite:///"), locked)  # a store with tables
    stores = {
        "http-closed-port": f"http://alice:{PASSWORD}@127.0.0.1:9",  # a team server's URI, with its credentials
        "sqlite-under-a-file": f"sqlite:///{tmp_path / 'a-file' / 'mlflow.db'}",
        "sqlite-locked": f"sqlite:///{locked}",
    }
    holder = sqlite3.connect(locked, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another writer holds the database for the whole stage
    copies, processes = [], []
    try:
        for case, uri in stores.items():
            copies.append(copy_of(project, tmp_path / case))
            shutil.copytree(project.repo / "data/prepared", copies[-1].repo / "data/prepared")
            env = {
                "MLFLOW_TRACKING_URI": uri,
                "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
                "MLFLOW_HTTP_REQUEST_TIMEOUT": "2",
                "MLFLOW_TRACKING_TOKEN": TOKEN,
                "PIPELINE_LOG_FILE": str(tmp_path / f"{case}.log"),
            }
            processes.append(copies[-1].start("train_scratch", env=env))
        results = in_parallel(processes)
    finally:
        holder.rollback()
        holder.close()
    for case, copy, result in zip(stores, copies, results, strict=True):
        assert result.returncode == 0, f"{case}: {result.stderr[-3000:]}"
        assert "warning: MLflow start failed" in result.stderr, case
        assert "metrics/*.json still record this run" in result.stderr
        assert result.stderr.count("warning: MLflow") == 1, case  # one warning, then no more attempts
        assert_training_outputs_complete(copy.repo)
    assert "database is locked" in results[2].stderr
    # the credentials are masked in the warning and written nowhere: not in the log file, not in any output
    assert "http://alice:***@127.0.0.1:9" in results[0].stderr
    written = [tmp_path / f"{case}.log" for case in stores]
    written += [path for copy in copies for path in copy.repo.rglob("*") if path.is_file() and ".git" not in path.parts]
    for text in [result.stdout + result.stderr for result in results] + [p.read_bytes().decode(errors="replace")
                                                                          for p in written]:  # fmt: skip
        assert PASSWORD not in text and TOKEN not in text


def git_dvc(repo: Path, env: dict[str, str], *args: str, timeout: float = 600) -> str:
    result = subprocess.run(args, cwd=repo, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{' '.join(args)}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout + result.stderr


def queued_project(tmp_path: Path, project) -> tuple[Path, dict[str, str]]:
    """A git + DVC copy of the finished project's code and params (train_scratch: one seed, one epoch), committed,
    so `dvc exp run --queue` can take it; MLflow's default store, DVC_ROOT's mlflow.db, for every job in it."""
    repo = tmp_path / "queued"
    copy_project(repo)
    shutil.copy(project.repo / "params.yaml", repo / "params.yaml")
    set_params(repo, seeds=[0], train_scratch={"paper": {"epochs": 1}})
    env = {k: v for k, v in project.env.items() if k != "MLFLOW_TRACKING_URI"}
    for command in (
        ["git", "init", "-q"], ["dvc", "init", "-q"], ["dvc", "config", "core.analytics", "false"],
        ["git", "add", "-A"], ["git", "commit", "-qm", "project"],
    ):  # fmt: skip
        git_dvc(repo, env, *command)
    return repo, env


def start_workers(repo: Path, env: dict[str, str], jobs: int) -> None:
    """``dvc queue start``, its output to a file: each worker's forked parent inherits the command's stdout and keeps
    it open until the queue empties, so through a pipe the command would not return before every job ends (CI's
    timeout on it) and nothing queued would ever run beside the direct run."""
    log = repo.parent / "queue-start.log"
    with log.open("w") as out:
        started = subprocess.run(["dvc", "queue", "start", "-j", str(jobs)], cwd=repo, env=env, stdout=out,
                                 stderr=subprocess.STDOUT, timeout=120)  # fmt: skip
    assert started.returncode == 0, log.read_text()[-3000:]


def run_queue(repo: Path, env: dict[str, str], lrs: list[str], jobs: int, beside=None) -> str:
    """Queues one train_scratch experiment per learning rate, starts ``jobs`` workers, calls ``beside()`` once a
    job runs (or at once where none does), and waits (at most 15 minutes) for the queue to empty; its status."""
    for lr in lrs:
        git_dvc(repo, env, "dvc", "exp", "run", "--queue", "-n", f"lr-{lr}", "-S", f"train_scratch.paper.lr={lr}",
                "train_scratch")  # fmt: skip
    start_workers(repo, env, jobs)
    deadline = time.monotonic() + 900
    try:
        while True:
            status = git_dvc(repo, env, "dvc", "queue", "status")
            if beside is not None and ("Running" in status or not re.search(r"\bQueued\b", status)):
                beside = beside()  # None: once
            if not re.search(r"\b(Queued|Running)\b", status):
                break
            assert time.monotonic() < deadline, status
            time.sleep(2)
    finally:
        subprocess.run(["dvc", "queue", "stop", "--kill"], cwd=repo, env=env, capture_output=True, timeout=120)
    return status


def assert_every_job_recorded(repo: Path, names: list[str], lrs: list[str]) -> list:
    """Each queued job (and a direct run, named ``workspace``) has one FINISHED stage run with its own lr, tagged
    with its DVC experiment's name, its seeds nested in it with every epoch's val_acc; the stage runs."""
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{repo / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("vit-paper")
    runs = client.search_runs([experiment.experiment_id])
    stages = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]  # one per job, its seeds nested in it
    assert sorted(r.data.params["train_scratch.paper.lr"] for r in stages) == sorted(lrs)
    assert {r.info.status for r in runs} == {"FINISHED"}
    assert sorted(r.data.tags.get("dvc_experiment", "workspace") for r in stages) == sorted(names)
    seeds = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert sorted(r.data.tags["mlflow.parentRunId"] for r in seeds) == sorted(r.info.run_id for r in stages)
    for run in seeds:
        assert run.data.tags.get("dvc_experiment") == client.get_run(run.data.tags["mlflow.parentRunId"]).data.tags.get(
            "dvc_experiment"
        )
        assert len(client.get_metric_history(run.info.run_id, "val_acc")) == 1
    return stages


@pytest.mark.e2e
def test_two_queued_experiments_in_parallel_are_both_recorded_in_mlflow(tmp_path, project):
    repo, env = queued_project(tmp_path, project)
    lrs = ["0.001", "0.002"]
    status = run_queue(repo, env, lrs, jobs=2)
    assert status.count("Success") == 2, status
    assert_every_job_recorded(repo, [f"lr-{lr}" for lr in lrs], lrs)
    shown = git_dvc(repo, env, "dvc", "exp", "show", "--csv")
    assert "lr-0.001" in shown and "lr-0.002" in shown  # dvc exp show lists both jobs


@pytest.mark.e2e
@pytest.mark.reliability
def test_four_queued_experiments_on_two_workers_and_a_direct_run_beside_them_all_finish_in_one_store(tmp_path, project):
    """Side by side: two workers take four experiments in turn while a stage runs directly in the workspace, all
    five writing to one mlflow.db; nothing waits on another's lock, no run or metric is lost or mislabelled."""
    repo, env = queued_project(tmp_path, project)
    shutil.copytree(project.repo / "data/prepared", repo / "data/prepared")  # the direct run's inputs
    lrs = ["0.001", "0.002", "0.003", "0.004"]
    direct = []

    def run_directly() -> None:
        workspace = Project(repo, env, project.server, project.inject)
        with workspace.params(train_scratch={"paper": {"epochs": 1, "lr": 0.0005}}):
            direct.append(finish(workspace.start("train_scratch")))

    status = run_queue(repo, env, lrs, jobs=2, beside=run_directly)
    assert status.count("Success") == 4, status
    assert direct and direct[0].returncode == 0, direct[0].stderr[-3000:]
    assert_every_job_recorded(repo, [f"lr-{lr}" for lr in lrs] + ["workspace"], [*lrs, "0.0005"])
    shown = git_dvc(repo, env, "dvc", "exp", "show", "--csv")
    assert all(f"lr-{lr}" in shown for lr in lrs)
