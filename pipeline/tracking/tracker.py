"""MLflow tracking that never stops a stage: on any MLflow failure it warns once and carries on.

DVC's metrics files are the record; MLflow is the browsable history, in the store of
:mod:`pipeline.tracking.mlflow_store` (artifacts in ``<repo root>/mlartifacts``), each run tagged with
:mod:`pipeline.tracking.provenance` and the params dvc.yaml lists for its stage (:mod:`pipeline.tracking.dvc_files`).

MLflow works off the training's critical path: importing it and its SQL store and opening a run cost a stage
process about 2 s before its first step (issue 19's fixed cost), so one background thread per process
(:class:`Background`) makes every MLflow call, in the order the stage asked for them, while the stage trains.
A stage's own run waits for that thread when it ends, so nothing is lost when the process exits; an artifact or a
model is logged in the stage's thread after the calls queued before it (files may change later, and a model's
export is torch work, which stays in the thread that trains).
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import queue
import threading
import time
import warnings
from pathlib import Path

import torch

from pipeline.core.files import is_main_process
from pipeline.tracking.dvc_files import data_digest, stage_params
from pipeline.tracking.mlflow_store import (
    bound_http_retries,
    mark_dead_runs_killed,
    quiet_mlflow_logs,
    repo_root,
    retry_when_locked,
    start_system_metrics,
    store_lock,
    tracking_uri,
)
from pipeline.tracking.provenance import context_tags, git_state, provenance

log = logging.getLogger(__name__)


# What a logged model needs to load (given, so MLflow does not spend seconds inferring it from the environment).
MODEL_REQUIREMENTS = [f"torch=={torch.__version__.split('+')[0]}"]
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}  # `mlflow ui` opens on the runs


class Background:
    """One daemon thread that runs queued calls in order; :meth:`wait` returns once every call queued before it
    has run. A call that raises is logged and the next one runs (the :class:`Tracker` calls catch their own)."""

    def __init__(self):
        self.calls: queue.Queue = queue.Queue()
        self.thread: threading.Thread | None = None
        self.guard = threading.Lock()

    def submit(self, call) -> None:
        with self.guard:
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, name="mlflow-tracking", daemon=True)
                self.thread.start()
        self.calls.put(call)

    def wait(self) -> None:
        if threading.current_thread() is not self.thread:  # a queued call never waits for itself
            self.calls.join()

    def _run(self) -> None:
        while True:
            call = self.calls.get()
            try:
                call()
            except Exception as error:
                log.warning(f"MLflow tracking: {type(error).__name__}: {error}")
            finally:
                self.calls.task_done()


BACKGROUND = Background()  # the process's one tracking thread, started by the first run's first call


class Tracker:
    """One MLflow run. Use as a context manager; every method is a no-op after a failure.

    A stage opens one run (:func:`stage_tracker`) and, per seed or sweep point, a nested run under it
    (:meth:`child`), so that `mlflow ui` lists one expandable row per stage invocation. The calls run on
    :data:`BACKGROUND` in the order they were made; leaving a run that has no parent waits for all of them, so
    ``client`` and ``run_id`` are only meaningful after that.
    """

    def __init__(
        self,
        experiment: str,
        run_name: str,
        tags: dict[str, str],
        params: dict[str, str],
        parent: Tracker | None = None,
    ):
        self.experiment, self.run_name, self.tags, self.params = experiment, run_name, tags, params
        self.parent = parent  # its run id is known only once its start has run, before this run's start
        self.inputs: list[tuple[str, str, str, str]] = []  # (name, digest, source, context), logged at start
        self.failed = False  # after one warning, no more attempts (nor in child runs)
        self.client = None
        self.run_id = None
        self.monitor = None  # MLflow's system-metrics sampler (CPU, memory, disk), on a stage's own run
        self.started = time.time()

    def child(self, run_name: str, params: dict[str, str] | None = None, **tags: str) -> Tracker:
        """A run nested under this one (``mlflow.parentRunId``), with this run's tags and ``tags``; its params
        are only what tells it apart from its siblings (seed, arm, size, variant)."""
        return Tracker(self.experiment, run_name, {**self.tags, **tags}, params or {}, parent=self)

    def _fail(self, action: str, error: Exception) -> None:
        message = (
            f"MLflow {action} failed ({type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''})"
        )
        log.warning(f"{message}; continuing without tracking (metrics/*.json still record this run)")
        self.client = None
        self.failed = True

    def __enter__(self) -> Tracker:
        if is_main_process():  # under torchrun, rank 0 alone records the run
            self.started = time.time()
            BACKGROUND.submit(self._start)
        return self

    def _start(self) -> None:
        if self.parent is not None:
            self.failed = self.parent.failed
        if self.failed:
            return
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                import mlflow
                from mlflow.entities import Param

                uri = tracking_uri()
                bound_http_retries()
                quiet_mlflow_logs()
                git = git_state()
                tags = {**self.tags, **git, **provenance(), **context_tags(git["git_commit"])}
                if self.parent is not None:
                    tags["mlflow.parentRunId"] = self.parent.run_id
                if os.environ.get("DVC_EXP_NAME"):
                    tags["dvc_experiment"] = os.environ["DVC_EXP_NAME"]
                params = [Param(k, str(v)[:6000]) for k, v in self.params.items()]
                with store_lock(uri):
                    # the sqlite store reads its schema version when made: locked, like any write, it waits
                    self.client = retry_when_locked(lambda: mlflow.MlflowClient(tracking_uri=uri))
                    experiment_id = retry_when_locked(lambda: self._experiment_id(uri))
                    if self.parent is None:
                        retry_when_locked(lambda: mark_dead_runs_killed(self.client, experiment_id))
                    # tagged as it is made: a SIGKILL between making and tagging would leave a RUNNING run
                    # without the host and pid that mark_dead_runs_killed needs to mark it KILLED later
                    run = retry_when_locked(lambda: self.client.create_run(
                        experiment_id, run_name=self.run_name, tags={k: str(v) for k, v in tags.items()}))  # fmt: skip
                    self.run_id = run.info.run_id
                    retry_when_locked(lambda: self.client.log_batch(self.run_id, params=params, synchronous=True))
            if self.parent is None:
                self.monitor = start_system_metrics(self.run_id, uri)
        except Exception as error:  # any MLflow or store problem must not stop the stage
            self._fail("start", error)
        for dataset in self.inputs:
            self._log_input(*dataset)

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

    def log_record(self, record: dict, step: str = "epoch", keys=None, prefix: str = "") -> None:
        """One training record (an epoch's or a score's numbers) at its ``record[step]``: every number but the
        ``epoch`` and ``step`` counters, or only ``keys``; ``prefix`` renames ``test_*`` (the pool's test split is
        logged as ``pool_test_*``, apart from the arms' test accuracy)."""
        numbers = {k: v for k, v in record.items() if k not in ("epoch", "step") and (keys is None or k in keys)}
        if prefix:
            numbers = {k.replace("test_", f"{prefix}test_"): v for k, v in numbers.items()}
        self.log_metrics(numbers, step=record[step])

    def log_metrics(self, metrics: dict[str, float | None], step: int | None = None) -> None:
        """``metrics`` at ``step``; a None value (step 0's score has no training loss yet) is left out. The values
        are read now (a tensor may change after the call), and logged in the background."""
        try:
            numbers = {k: float(v) for k, v in metrics.items() if v is not None}
        except (TypeError, ValueError) as error:  # a value that is no number: a warning, as for MLflow's errors
            BACKGROUND.submit(lambda failure=error: self.client is not None and self._fail("log_metrics", failure))
            return
        if numbers:
            now = int(time.time() * 1000)
            BACKGROUND.submit(lambda: self._log_metrics(numbers, step or 0, now))

    def _log_metrics(self, metrics: dict[str, float], step: int, now: int) -> None:
        if self.client is None:
            return
        try:
            from mlflow.entities import Metric

            batch = [Metric(k, v, now, step) for k, v in metrics.items()]
            retry_when_locked(lambda: self.client.log_batch(self.run_id, metrics=batch, synchronous=True))
        except Exception as error:
            self._fail("log_metrics", error)

    def log_artifact(self, path: str | Path, folder: str | None = None) -> None:
        """A file or folder (a stage's plot, history, confusion data) stored with the run, as it is now."""
        BACKGROUND.wait()
        if self.client is None or not Path(path).exists():
            return
        try:
            if Path(path).is_dir():
                self.client.log_artifacts(self.run_id, str(path), folder)
            else:
                self.client.log_artifact(self.run_id, str(path), folder)
        except Exception as error:
            self._fail("log_artifact", error)

    def _log_input(self, name: str, digest: str, source: str, context: str) -> None:
        """The data a run read (``inputs``), as an MLflow dataset input (`mlflow ui`'s Datasets column):
        ``digest`` is DVC's md5 of the folder, so two runs on the same data show the same digest."""
        if self.client is None:
            return
        try:
            from mlflow.entities import Dataset, DatasetInput, InputTag

            dataset = Dataset(name=name, digest=digest[:36], source_type="local", source=source)
            inputs = [DatasetInput(dataset, tags=[InputTag("mlflow.data.context", context)])]
            retry_when_locked(lambda: self.client.log_inputs(self.run_id, datasets=inputs))
        except Exception as error:
            self._fail("log_input", error)

    def log_model(self, model, input_example, name: str = "model") -> None:
        """``model`` as an MLflow PyTorch model in the pt2 format (``torch.export``, its batch size free), with a
        signature inferred from ``input_example`` (a batch)."""
        BACKGROUND.wait()
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
        if not is_main_process():
            return
        wall_time = time.time() - self.started
        # a stage stopped by SIGTERM or Ctrl-C (pipeline.core.entry.Stopped is a KeyboardInterrupt) was killed
        killed = exc_type is not None and issubclass(exc_type, KeyboardInterrupt)
        status = "FINISHED" if exc_type is None else "KILLED" if killed else "FAILED"
        BACKGROUND.submit(lambda: self._finish(status, wall_time))
        if self.parent is None:  # the stage's own run: every call made, before the process may exit
            BACKGROUND.wait()

    def _finish(self, status: str, wall_time: float) -> None:
        if self.monitor is not None:
            with contextlib.suppress(Exception):
                self.monitor.finish()  # its last samples are logged before the run ends
        if self.client is None:
            return
        try:
            retry_when_locked(lambda: self.client.log_metric(self.run_id, "wall_time_s", wall_time))
            retry_when_locked(lambda: self.client.set_terminated(self.run_id, status=status))
        except Exception as error:
            self._fail("finish", error)


def stage_tracker(
    params, stage: str, seed: int | None = None, runtime=None, dvc_stage: str | None = None, **tags: str
) -> Tracker:
    """The :class:`Tracker` of one stage invocation in the preset's MLflow experiment: the params the stage
    reads (dvc.yaml's list for ``dvc_stage``, default ``stage``), the data hash (the prepared manifest's
    sha256) and the runtime (device, precision actually used, CPU kind) as tags. Per-seed runs are its
    :meth:`Tracker.child` runs."""
    from pipeline.core import paths
    from pipeline.core.files import file_sha256
    from pipeline.core.params_yaml import flatten

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
