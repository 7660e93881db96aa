"""Killed anywhere, the pipeline converges: real `dvc repro` on the tiny offline fixture, SIGKILLed (the whole
process group, as a lost machine or the OOM killer would) at points over every stage kind and between a stage's
writes and DVC's record of them, rerun after each kill; the end matches an uninterrupted run byte for byte.

Long (two whole tiny runs and a dozen restarts): `make test-reliability` and CI run it, `make test` does not.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from tiny_offline import listing, run_checked, tiny_project

pytestmark = [pytest.mark.e2e, pytest.mark.reliability]

RESULT_FOLDERS = ("metrics", "plots")
WRITTEN = ".written"  # the marker a wrapped stage command leaves once its outputs are written


@dataclass(frozen=True)
class KillPoint:
    """Where one run is killed: ``delay`` seconds after stage ``stage`` takes its lock ``.locks/<lock>.lock``
    (its main is running: imports done), or after its MLflow run opens where ``open_run``; or, where ``lock`` is None,
    after the stage's process has written its outputs and exited, before DVC records them in dvc.lock."""

    stage: str
    lock: str | None
    delay: float = 0.0
    open_run: bool = False  # the delay counts from the moment its MLflow run is RUNNING in mlflow.db


# In DVC's order of the tiny run (a point never reached fails the test).
POINTS = (
    KillPoint("prepare", None),  # its main takes milliseconds here: killed between its outputs and dvc.lock
    KillPoint("backbone", "backbone", 1.0),  # pretraining
    KillPoint("train_scratch", "train_scratch", 0.2, open_run=True),  # training, its MLflow run open
    KillPoint("linear_probe", None),
    KillPoint("sweep_scratch@0", "sweep-scratch-0", 0.5),
    # the shared transfer sweep: two arms in one process, two point files
    KillPoint("sweep_pretrained@1", "sweep-linear_finetune-1", 0.2, open_run=True),
    KillPoint("data_hunger", "data_hunger", 0.1),  # an aggregation
    KillPoint("evaluate", None),
    KillPoint("ablation", "ablation", 0.5),
    # the pretraining axis, killed as soon as its run is open: on a fast CPU the tiny ResNet's run closes within 0.2 s
    # and no run follows, so a delay let the stage end unkilled (CI); at once, it also kills right after the run is made
    KillPoint("pretrain_scale@resnet-0", "pretrain_scale-resnet-0", 0.0, open_run=True),
    KillPoint("pretraining_scale", "pretraining_scale", 0.1),  # its aggregation
    KillPoint("summary", None),  # the last stage: the report's inputs
)


@dataclass
class Killed:
    point: KillPoint
    inside: bool  # the stage's process (or, for a written point, DVC before its record) was still running
    held: bool  # the stage still held its lock (and had its MLflow run open, where asked): the next run takes over
    output: str  # dvc repro's output up to the kill


def _lock_holder(repo: Path, lock: str) -> int | None:
    try:
        text = (repo / ".locks" / f"{lock}.lock").read_text().strip()
    except FileNotFoundError:
        return None
    return int(text) if text.isdigit() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").is_dir() and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()


def repro_killed_at(repo: Path, env: dict[str, str], point: KillPoint) -> Killed:
    """One `dvc repro`, SIGKILLed as a process group at ``point``."""
    dvc_yaml = repo / "dvc.yaml"
    committed = dvc_yaml.read_text()
    if point.lock is None:  # the stage's command, then a marker and a wait DVC cannot record past
        command = f"cmd: python -m pipeline.stages.{point.stage}\n"
        assert committed.count(command) == 1, point
        dvc_yaml.write_text(committed.replace(command, f"cmd: {command[5:-1]} && touch {WRITTEN} && sleep 600\n"))
    stale = _lock_holder(repo, point.lock) if point.lock else None  # a pid a killed run left there
    process = subprocess.Popen(["dvc", "repro"], cwd=repo, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)  # fmt: skip
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stdout), daemon=True)
    reader.start()
    deadline = time.monotonic() + 600
    try:
        while time.monotonic() < deadline and process.poll() is None:
            if point.lock is None and (repo / WRITTEN).exists():
                inside, held = True, False
                break
            holder = _lock_holder(repo, point.lock) if point.lock else None
            if holder is not None and holder != stale and _alive(holder):
                left_running = _running_runs(repo)  # by an earlier kill, until a stage marks them KILLED

                def holding(holder: int = holder, left_running: set = left_running) -> bool:
                    # the lock still the holder's and, where asked, one of its runs open
                    open_run = not point.open_run or bool(_running_runs(repo) - left_running)
                    return _lock_holder(repo, point.lock) == holder and open_run

                while point.open_run and not holding() and _alive(holder):
                    time.sleep(0.01)
                time.sleep(point.delay)
                # A run may end within the delay (the shared sweep's first arm takes a fraction of a second on
                # the tiny fixture): wait for the holder's next open run rather than kill between two of them.
                while not holding() and _alive(holder):
                    time.sleep(0.005)
                inside = _alive(holder)
                held = inside and holding()
                break
            time.sleep(0.01)
        else:
            reader.join(timeout=10)
            pytest.fail(f"dvc repro ended (or hung) before {point}:\n{''.join(lines)[-3000:]}")
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=60)
        reader.join(timeout=10)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        dvc_yaml.write_text(committed)
        (repo / WRITTEN).unlink(missing_ok=True)
    return Killed(point, inside, held, "".join(lines))


def _runs(repo: Path, status: str) -> set[str]:
    """The ids of the runs in ``status`` in the project's MLflow store (none before MLflow made its tables)."""
    if not (repo / "mlflow.db").is_file():
        return set()
    try:
        with sqlite3.connect(f"file:{repo / 'mlflow.db'}?mode=ro", uri=True) as db:
            return {run for (run,) in db.execute("SELECT run_uuid FROM runs WHERE status = ?", (status,))}
    except sqlite3.OperationalError:  # no runs table yet, or MLflow is writing its schema
        return set()


def _running_runs(repo: Path) -> set[str]:
    return _runs(repo, "RUNNING")


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> list[str]:
    repo = tmp_path_factory.mktemp("uninterrupted")
    env = tiny_project(repo)
    run_checked(["dvc", "repro"], repo, env, timeout=900)
    return listing(repo, RESULT_FOLDERS)


def test_killed_at_every_stage_kind_and_before_dvc_lock_the_reruns_converge_to_the_uninterrupted_outputs(
    tmp_path, uninterrupted
):
    repo = tmp_path / "project"
    repo.mkdir()
    env = tiny_project(repo)
    kills = []
    for point in POINTS:
        killed = repro_killed_at(repo, env, point)
        assert f"Running stage '{point.stage}'" in killed.output, killed.output[-3000:]
        assert killed.inside and (killed.held or point.lock is None), (point, killed.output[-3000:])
        kills.append(killed)
    final = subprocess.run(["dvc", "repro"], cwd=repo, env=env, capture_output=True, text=True, timeout=900)
    assert final.returncode == 0, final.stdout[-3000:] + final.stderr[-3000:]
    # every killed stage ran again: none was recorded as done by a run that did not finish it
    outputs = [kill.output for kill in kills[1:]] + [final.stdout + final.stderr]
    for kill, after in zip(kills, outputs, strict=True):
        assert f"Running stage '{kill.point.stage}'" in after, kill.point
        if kill.point.lock is not None:  # its lock, left by a dead pid, was taken over with one line
            assert f"taking over lock .locks/{kill.point.lock}.lock, left by pid" in after, after[-3000:]
    assert "up to date" in run_checked(["dvc", "status"], repo, env).lower()
    assert listing(repo, RESULT_FOLDERS) == uninterrupted  # byte for byte: no stray temporary file either
    assert _running_runs(repo) == set()  # the runs the kills left RUNNING were marked KILLED by the next stage
    assert len(_runs(repo, "KILLED")) >= sum(point.open_run for point in POINTS)
