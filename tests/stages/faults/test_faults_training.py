"""Faults of training (pipeline/train/loop.py): a non-finite loss (issue 5's case 8), a run killed with SIGKILL
then rerun (9), a run stopped politely (SIGTERM, Ctrl-C's SIGINT), and determinism (13)."""

from __future__ import annotations

import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
import torch
from fault_project import assert_fails, copy_of
from helpers import digest_tree

TRAINING_OUTPUTS = ("models/scratch", "plots/history/scratch.csv", "plots/history/scratch_seeds.csv")


def test_non_finite_loss_stops_training_with_epoch_step_and_cause(project, unchanged):
    with project.params(train_scratch={"paper": {"lr": 1e30}}):
        result = project.stage("train_scratch")
    line = assert_fails(result, "train_scratch", "the training loss became", "at epoch 1, step", "learning rate")
    assert re.search(r"became (nan|inf)", line) and "Lower the lr" in line


def signal_after_first_epoch(project, signum: int) -> tuple[subprocess.Popen, str]:
    """Runs train_scratch for 4 epochs (long enough to stop after its first), sends ``signum`` once it logs its
    first epoch, and returns the ended process and what it printed after that line."""
    with project.params(train_scratch={"paper": {"epochs": 4}}):
        process = subprocess.Popen(  # its log lines go to stderr, read here with stdout
            [sys.executable, "-m", "pipeline.stages.train_scratch"],
            cwd=project.repo, env=project.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        for line in process.stdout:
            if "epoch 1:" in line:
                break
        process.send_signal(signum)
        rest = process.stdout.read()
        process.wait()
        process.stdout.close()
    return process, rest


def test_training_killed_mid_run_then_rerun_matches_an_uninterrupted_run(project):
    repo = project.repo
    before = {p: digest_tree(repo / p) for p in TRAINING_OUTPUTS}
    baseline_state = torch.load(repo / "models/scratch/seed_0.pt", weights_only=True)
    process, _ = signal_after_first_epoch(project, signal.SIGKILL)
    assert process.returncode == -signal.SIGKILL
    assert {p: digest_tree(repo / p) for p in TRAINING_OUTPUTS} == before  # the killed run replaced nothing
    # What a kill during a checkpoint write leaves: the dead process's temporary file inside the output folder.
    leftover = repo / "models/scratch" / f".seed_0.pt.{process.pid}.k1ll3d.tmp"
    leftover.write_bytes(b"half a checkpoint")
    project.ok("train_scratch")
    assert sorted(p.name for p in (repo / "models/scratch").iterdir()) == ["model.json", "seed_0.pt"]  # no leftover
    for path in ("plots/history/scratch.csv", "plots/history/scratch_seeds.csv"):
        assert digest_tree(repo / path) == before[path]  # per-epoch metrics identical to the uninterrupted run
    state = torch.load(repo / "models/scratch/seed_0.pt", weights_only=True)
    assert state.keys() == baseline_state.keys() and all(torch.equal(state[k], baseline_state[k]) for k in state)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stage_stopped_politely_says_so_in_one_line_keeps_its_outputs_and_marks_its_runs_killed(project, signum):
    repo = project.repo
    before = {p: digest_tree(repo / p) for p in TRAINING_OUTPUTS}
    started_ms = int(time.time() * 1000)
    process, rest = signal_after_first_epoch(project, signum)
    assert process.returncode == 128 + signum, rest[-3000:]
    assert "Traceback" not in rest
    (said,) = [line for line in rest.splitlines() if "stopped by" in line]
    assert said.startswith(f"stage train_scratch stopped by {signal.Signals(signum).name} after ")
    assert {p: digest_tree(repo / p) for p in TRAINING_OUTPUTS} == before  # nothing replaced, nothing half-written
    assert not [p for p in (repo / "models").rglob("*.tmp")] and not list((repo / "plots").rglob("*.tmp"))
    database = project.env["MLFLOW_TRACKING_URI"].removeprefix("sqlite:///")
    with sqlite3.connect(database) as store:
        statuses = [row[0] for row in store.execute("SELECT status FROM runs WHERE start_time >= ?", (started_ms,))]
    assert statuses and set(statuses) == {"KILLED"}  # the stage's run and its seeds' runs


def test_same_seed_gives_byte_identical_metrics_and_another_seed_changes_them(project, tmp_path):
    """Runs after the test above, whose rerun trained the scratch models a second time."""
    repo = project.repo
    metrics = repo / "metrics/evaluate.json"
    first = metrics.read_bytes()
    project.ok("evaluate")
    assert metrics.read_bytes() == first  # a second training run, evaluated again: the same bytes
    other = copy_of(project, tmp_path / "other-seed", seeds=[1])
    shutil.copytree(repo / "data/prepared", other.repo / "data/prepared")
    other.ok("train_scratch")
    seed_0 = (repo / "plots/history/scratch_seeds.csv").read_text().splitlines()
    seed_1 = (other.repo / "plots/history/scratch_seeds.csv").read_text().splitlines()
    assert seed_0[0] == seed_1[0] and len(seed_0) == len(seed_1) == 3
    assert all(a.startswith("0,") and b.startswith("1,") for a, b in zip(seed_0[1:], seed_1[1:], strict=True))
    assert [a.split(",")[1:] for a in seed_0[1:]] != [b.split(",")[1:] for b in seed_1[1:]]
