"""The MLflow store: where it is, and how a stage writes to it safely beside others.

The default store is ``sqlite:///<repo root>/mlflow.db`` (``DVC_ROOT`` when DVC sets it, so queued and temporary
experiments share one store); ``MLFLOW_TRACKING_URI`` points it elsewhere, e.g. at a team server. Parallel
writers (``dvc queue start -j 8``) share one SQLite file: the first use of a store, when MLflow creates or migrates
its tables, is serialised with a lock on the store's folder, and a write that finds the database locked is
retried with backoff instead of being dropped. A team server that refuses or stalls costs seconds.
"""

from __future__ import annotations

import contextlib
import logging
import os
import platform
import random
import time
from pathlib import Path

from pipeline.core.files import process_alive


def repo_root() -> Path:
    return Path(os.environ.get("DVC_ROOT") or Path.cwd()).resolve()


def tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{repo_root() / 'mlflow.db'}"


SYSTEM_METRICS_INTERVAL_S = 10  # MLflow's default; MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL overrides it
# A team server that refuses or stalls must cost a stage seconds, not minutes: MLflow's defaults (7 retries with
# exponential backoff, 120 s per request) made train_scratch take 273 s instead of 34 s against a refusing port.
# Applied where the user has not set them; after one failure a tracker stops trying (Tracker._fail).
HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                 "MLFLOW_HTTP_REQUEST_TIMEOUT": "5"}  # fmt: skip


def bound_http_retries() -> None:
    for key, value in HTTP_DEFAULTS.items():
        os.environ.setdefault(key, value)


def start_system_metrics(run_id: str, uri: str):
    """MLflow's system-metrics monitor (CPU, memory, disk, network; GPU where there is one) on ``run_id``, a
    thread sampling every ``SYSTEM_METRICS_INTERVAL_S``; None where it cannot start (psutil missing, or
    ``PIPELINE_SYSTEM_METRICS=0``)."""
    if os.environ.get("PIPELINE_SYSTEM_METRICS", "1") == "0":
        return None
    try:
        from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

        monitor = SystemMetricsMonitor(run_id, sampling_interval=SYSTEM_METRICS_INTERVAL_S, tracking_uri=uri)
    except Exception:  # psutil missing: the run goes on without system metrics
        return None
    monitor.start()
    return monitor


_LOCK_WAIT_S = 120.0  # the longest one stage waits for another's store set-up before tracking without MLflow
# How long one write keeps retrying "database is locked" (after SQLite's own 5 s wait each time) before the
# tracker gives up: eight writers (`dvc queue start -j 8`) finishing at once queue for tens of seconds, and giving
# up after a few left a successful run RUNNING, which the next stage then marked KILLED.
_LOCKED_WAIT_S = 120.0


def sqlite_path(uri: str) -> Path | None:
    return Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None


@contextlib.contextmanager
def store_lock(uri: str):
    """Holds an exclusive lock on a SQLite store's folder: two processes creating MLflow's tables at once
    corrupt the schema ("table ... already exists", "Online migration expected to match one row")."""
    path = sqlite_path(uri)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: no advisory locks; parallel queue jobs may lose runs
        fcntl = None
    if path is None or fcntl is None:
        yield
        return
    folder = path.parent
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder, os.O_RDONLY)  # a lock on the folder, not a file, so no lock file is left behind
    try:
        deadline = time.monotonic() + _LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"another process held the lock on {folder} for {_LOCK_WAIT_S:.0f} s") from None
                time.sleep(0.1)
        yield
    finally:
        os.close(fd)  # releases the lock


def retry_when_locked(action):
    """Runs ``action()``, retrying for up to ``_LOCKED_WAIT_S`` while SQLite reports the database locked by
    another writer, with jittered backoff (0.1 s doubling to 2 s) so writers that collided do not retry in step."""
    deadline = time.monotonic() + _LOCKED_WAIT_S
    attempt = 0
    while True:
        try:
            return action()
        except Exception as error:
            if "database is locked" not in str(error) or time.monotonic() >= deadline:
                raise
            time.sleep(min(2.0, 0.1 * 2**attempt) * random.uniform(0.5, 1.5))
            attempt += 1


def mark_dead_runs_killed(client, experiment_id: str) -> list[str]:
    """Marks this host's RUNNING runs whose process is gone (a SIGKILL, a closed laptop) as KILLED."""
    here = platform.node()
    killed = []
    for run in client.search_runs([experiment_id], filter_string="attributes.status = 'RUNNING'", max_results=1000):
        tags = run.data.tags
        pid = tags.get("pid", "")
        if tags.get("host") == here and pid.isdigit() and not process_alive(int(pid)):
            client.set_terminated(run.info.run_id, status="KILLED")
            killed.append(run.info.run_id)
    return killed


def quiet_mlflow_logs() -> None:
    """MLflow and alembic announce every store set-up at INFO ("Creating initial MLflow database tables..."):
    keep stage output to the stage's own lines."""
    for name in ("mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)
