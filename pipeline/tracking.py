"""MLflow tracking that never stops a stage: on any MLflow failure it warns once and carries on.

DVC's metrics files are the record; MLflow is the browsable history. The default store is
``sqlite:///<repo root>/mlflow.db`` (``DVC_ROOT`` when DVC sets it, so queued and temporary
experiments share one store) with artifacts in ``<repo root>/mlartifacts``;
``MLFLOW_TRACKING_URI`` points it elsewhere, e.g. at a team server.

Parallel writers (``dvc queue start -j 2``) share one SQLite file: the first use of a store, when
MLflow creates or migrates its tables, is serialised with a lock on the store's folder, and a
write that finds the database locked is retried with backoff instead of being dropped.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import os
import platform
import random
import subprocess
import sys
import time
import warnings
from pathlib import Path

import torch

from pipeline.files import is_main_process, process_alive

log = logging.getLogger(__name__)


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


def _sqlite_path(uri: str) -> Path | None:
    return Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None


@contextlib.contextmanager
def _store_lock(uri: str):
    """Holds an exclusive lock on a SQLite store's folder: two processes creating MLflow's tables at once
    corrupt the schema ("table ... already exists", "Online migration expected to match one row")."""
    path = _sqlite_path(uri)
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


def _retry_when_locked(action):
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


# What decides a run's results. Outputs are left out: `dvc repro` deletes a stage's git-tracked outputs
# before running it, so including them would call every run dirty.
SOURCES = ("pipeline", "params.yaml", "dvc.yaml")
# What a logged model needs to load (given, so MLflow does not spend seconds inferring it from the environment).
MODEL_REQUIREMENTS = [f"torch=={torch.__version__.split('+')[0]}"]
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}  # `mlflow ui` opens on the runs


def git_state() -> dict[str, str]:
    """The commit and whether the sources or params differ from it (``unknown`` outside git); read once per
    process and folder, which a stage's nested runs share."""
    return dict(_git_state(os.getcwd()))


@functools.cache
def _git_state(folder: str) -> dict[str, str]:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=folder, capture_output=True, text=True, check=True, timeout=30
        ).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no", "--", *SOURCES))
    except (OSError, subprocess.SubprocessError):
        return {"git_commit": "unknown", "git_dirty": "unknown"}
    return {"git_commit": commit, "git_dirty": str(dirty).lower()}


def context_tags(commit: str) -> dict[str, str]:
    """MLflow's reserved tags (the Source, Version and User columns of `mlflow ui`), and host and pid, by
    which a later stage tells that this run's process died."""
    import getpass

    script = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python"
    source = next((arg for arg in sys.orig_argv[1:] if arg.startswith("pipeline.")), script)  # the -m module
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # pragma: no cover - a uid without a name
        user = "unknown"
    return {
        "mlflow.source.name": source,
        "mlflow.source.type": "LOCAL",
        "mlflow.source.git.commit": commit,
        "mlflow.user": user,
        "host": platform.node(),
        "pid": str(os.getpid()),
    }


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


def provenance() -> dict[str, str]:
    """Versions and machine, logged with every run."""
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
        "cpu_count": str(os.cpu_count()),
    }


def quiet_mlflow_logs() -> None:
    """MLflow and alembic announce every store set-up at INFO ("Creating initial MLflow database tables..."):
    keep stage output to the stage's own lines."""
    for name in ("mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)


class Tracker:
    """One MLflow run. Use as a context manager; every method is a no-op after a failure.

    A stage opens one run (:func:`stage_tracker`) and, per seed or sweep point, a nested run under it
    (:meth:`child`), so that `mlflow ui` lists one expandable row per stage invocation.
    """

    def __init__(
        self, experiment: str, run_name: str, tags: dict[str, str], params: dict[str, str], parent_id: str | None = None
    ):
        self.experiment, self.run_name, self.tags, self.params = experiment, run_name, tags, params
        self.parent_id = parent_id
        self.inputs: list[tuple[str, str, str, str]] = []  # (name, digest, source, context), logged at start
        self.failed = False  # after one warning, no more attempts (nor in child runs)
        self.client = None
        self.run_id = None
        self.monitor = None  # MLflow's system-metrics sampler (CPU, memory, disk), on a stage's own run
        self.started = time.time()

    def child(self, run_name: str, params: dict[str, str] | None = None, **tags: str) -> Tracker:
        """A run nested under this one (``mlflow.parentRunId``), with this run's tags and ``tags``; its params
        are only what tells it apart from its siblings (seed, arm, size, variant)."""
        child = Tracker(self.experiment, run_name, {**self.tags, **tags}, params or {}, parent_id=self.run_id)
        child.failed = self.failed
        return child

    def _fail(self, action: str, error: Exception) -> None:
        message = (
            f"MLflow {action} failed ({type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''})"
        )
        log.warning(f"{message}; continuing without tracking (metrics/*.json still record this run)")
        self.client = None
        self.failed = True

    def __enter__(self) -> Tracker:
        if self.failed or not is_main_process():  # under torchrun, rank 0 alone records the run
            return self
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                import mlflow
                from mlflow.entities import Param, RunTag

                uri = tracking_uri()
                bound_http_retries()
                quiet_mlflow_logs()
                git = git_state()
                tags = {**self.tags, **git, **provenance(), **context_tags(git["git_commit"])}
                if self.parent_id is not None:
                    tags["mlflow.parentRunId"] = self.parent_id
                if os.environ.get("DVC_EXP_NAME"):
                    tags["dvc_experiment"] = os.environ["DVC_EXP_NAME"]
                params = [Param(k, str(v)[:6000]) for k, v in self.params.items()]
                with _store_lock(uri):
                    self.client = mlflow.MlflowClient(tracking_uri=uri)
                    experiment_id = _retry_when_locked(lambda: self._experiment_id(uri))
                    if self.parent_id is None:
                        _retry_when_locked(lambda: mark_dead_runs_killed(self.client, experiment_id))
                    run = _retry_when_locked(lambda: self.client.create_run(experiment_id, run_name=self.run_name))
                    self.run_id = run.info.run_id
                    _retry_when_locked(
                        lambda: self.client.log_batch(
                            self.run_id,
                            params=params,
                            tags=[RunTag(k, str(v)) for k, v in tags.items()],
                            synchronous=True,
                        )
                    )
            if self.parent_id is None:
                self.monitor = start_system_metrics(self.run_id, uri)
        except Exception as error:  # any MLflow or store problem must not stop the stage
            self._fail("start", error)
        for dataset in self.inputs:
            self.log_input(*dataset)
        return self

    def _experiment_id(self, uri: str) -> str:
        found = self.client.get_experiment_by_name(self.experiment)
        if found is not None:
            for key, value in EXPERIMENT_KIND.items():
                if found.tags.get(key) != value:  # made by an older version of this code
                    self.client.set_experiment_tag(found.experiment_id, key, value)
            return found.experiment_id
        artifacts = None
        if uri.startswith("sqlite:"):
            artifacts = (repo_root() / "mlartifacts" / self.experiment).as_uri()
        return self.client.create_experiment(self.experiment, artifact_location=artifacts, tags=EXPERIMENT_KIND)

    def log_metrics(self, metrics: dict[str, float | None], step: int | None = None) -> None:
        """``metrics`` at ``step``; a None value (step 0's score has no training loss yet) is left out."""
        metrics = {k: v for k, v in metrics.items() if v is not None}
        if self.client is None or not metrics:
            return
        try:
            from mlflow.entities import Metric

            now = int(time.time() * 1000)
            batch = [Metric(k, float(v), now, step or 0) for k, v in metrics.items()]
            _retry_when_locked(lambda: self.client.log_batch(self.run_id, metrics=batch, synchronous=True))
        except Exception as error:
            self._fail("log_metrics", error)

    def log_artifact(self, path: str | Path, folder: str | None = None) -> None:
        """A file or folder (a stage's plot, history, confusion data) stored with the run."""
        if self.client is None or not Path(path).exists():
            return
        try:
            if Path(path).is_dir():
                self.client.log_artifacts(self.run_id, str(path), folder)
            else:
                self.client.log_artifact(self.run_id, str(path), folder)
        except Exception as error:
            self._fail("log_artifact", error)

    def log_input(self, name: str, digest: str, source: str, context: str) -> None:
        """The data a run read, as an MLflow dataset input (`mlflow ui`'s Datasets column): ``digest`` is
        DVC's md5 of the folder, so two runs on the same data show the same digest."""
        if self.client is None:
            return
        try:
            from mlflow.entities import Dataset, DatasetInput, InputTag

            dataset = Dataset(name=name, digest=digest[:36], source_type="local", source=source)
            inputs = [DatasetInput(dataset, tags=[InputTag("mlflow.data.context", context)])]
            _retry_when_locked(lambda: self.client.log_inputs(self.run_id, datasets=inputs))
        except Exception as error:
            self._fail("log_input", error)

    def log_model(self, model, input_example, name: str = "model") -> None:
        """``model`` as an MLflow PyTorch model in the pt2 format (``torch.export``, its batch size free), with a
        signature inferred from ``input_example`` (a batch)."""
        if self.client is None:
            return
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                import mlflow

                mlflow.set_tracking_uri(tracking_uri())
                model = copy.deepcopy(model).cpu().eval()  # the caller's model stays where and as it was
                example = input_example.cpu()
                with torch.inference_mode():
                    output = model(example).float().numpy()
                signature = mlflow.models.infer_signature(example.numpy(), output)
                with mlflow.start_run(run_id=self.run_id):
                    # pt2 (torch.export): a graph and raw tensors, so the model loads with torch alone, without
                    # this project on the path and without unpickling a class (the pickle format needs both)
                    mlflow.pytorch.log_model(model, name=name, signature=signature, serialization_format="pt2",
                                             input_example=example.numpy(),
                                             pip_requirements=MODEL_REQUIREMENTS)  # fmt: skip
        except Exception as error:
            self._fail("log_model", error)

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.monitor is not None:
            with contextlib.suppress(Exception):
                self.monitor.finish()  # its last samples are logged before the run ends
        if self.client is None:
            return
        try:
            wall_time = time.time() - self.started
            _retry_when_locked(lambda: self.client.log_metric(self.run_id, "wall_time_s", wall_time))
            status = "FINISHED" if exc_type is None else "FAILED"
            _retry_when_locked(lambda: self.client.set_terminated(self.run_id, status=status))
        except Exception as error:
            self._fail("finish", error)


def read_yaml(path: Path):
    """A YAML file through libyaml where PyYAML has it: dvc.lock is about 200 KB, 2 s in pure Python on 2 cores."""
    import yaml

    return yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def stage_params(flat: dict[str, str], dvc_stage: str, dvc_yaml: Path = Path("dvc.yaml")) -> dict[str, str]:
    """The params ``dvc_stage`` reads (its ``params:`` list in dvc.yaml), from all params flattened; all of
    them when dvc.yaml or the stage is not there."""
    import yaml

    try:
        keys = read_yaml(dvc_yaml)["stages"][dvc_stage]["params"]
    except (OSError, KeyError, TypeError, yaml.YAMLError):
        return flat
    return {k: v for k, v in flat.items() if any(k == key or k.startswith(f"{key}.") for key in keys)}


def data_digest(folder: str = "data/prepared", lock: Path = Path("dvc.lock")) -> str:
    """DVC's md5 of ``folder`` as dvc.lock records it (the prepare stage's output), or "unknown"."""
    import yaml

    try:
        stages = read_yaml(lock)["stages"]
        return next(out["md5"] for stage in stages.values() for out in stage.get("outs", []) if out["path"] == folder)
    except (OSError, KeyError, TypeError, StopIteration, yaml.YAMLError):
        return "unknown"


def stage_tracker(
    params, stage: str, seed: int | None = None, runtime=None, dvc_stage: str | None = None, **tags: str
) -> Tracker:
    """The :class:`Tracker` of one stage invocation in the preset's MLflow experiment: the params the stage
    reads (dvc.yaml's list for ``dvc_stage``, default ``stage``), the data hash (the prepared manifest's
    sha256) and the runtime (device, precision actually used, CPU kind) as tags. Per-seed runs are its
    :meth:`Tracker.child` runs."""
    from pipeline import paths
    from pipeline.config import flatten
    from pipeline.files import file_sha256

    manifest = paths.PREPARED / "manifest.csv"
    all_tags = {"stage": stage, "preset": params.preset, **(runtime.tags() if runtime is not None else {}), **tags}
    if manifest.is_file():
        all_tags["data_sha256"] = file_sha256(manifest)
    if seed is not None:
        all_tags["seed"] = str(seed)
    run_name = stage if seed is None else f"{stage}-seed{seed}"
    tracker = Tracker(f"vit-{params.preset}", run_name, all_tags, stage_params(flatten(params), dvc_stage or stage))
    if manifest.is_file():
        digest = data_digest(str(paths.PREPARED))
        digest = all_tags["data_sha256"] if digest == "unknown" else digest
        tracker.inputs.append((f"{params.preset} prepared images", digest, str(paths.PREPARED), "training"))
    return tracker
