"""Every MLflow run of the preset's experiment in one table, and test accuracy per code version and experiment.

    make compare        # = python -m pipeline.tools.compare (or vit-compare)
    make ui             # prints the experiment's runs page (--ui), then starts mlflow ui

Reads the store of :func:`pipeline.tracking.mlflow_store.tracking_uri` (``mlflow.db`` at the repository root, or
``MLFLOW_TRACKING_URI``), experiment ``vit-<preset>``. Writes ``reports/compare.md`` and
``reports/compare.csv`` and prints the markdown. The summary groups runs by stage, arm, git commit,
dirty flag and DVC experiment, and gives the test accuracy's mean ± sample std over their seeds.
With ``--ui`` it writes nothing and prints the experiment's runs page in MLflow's UI instead.
A store that does not exist yet is never created.
"""

from __future__ import annotations

import argparse
import io
import math
import sys
from pathlib import Path

import pandas as pd

from pipeline.core.entry import stage_main, tool_parser
from pipeline.core.errors import UserError
from pipeline.core.files import write_text
from pipeline.core.params_yaml import load_params
from pipeline.core.redaction import redact
from pipeline.tracking.mlflow_store import tracking_uri

REPORTS = Path("reports")
KEY_PARAMS = ("lr", "epochs", "batch_size")  # from the run's own stage section, e.g. train_scratch.offline.lr
GROUP = ["stage", "arm", "git_commit", "git_dirty", "dvc_experiment"]
HINT = "run `dvc repro` (or `dvc exp run`) to record some"
UI = "http://127.0.0.1:5000"  # where `mlflow ui` listens by default


def require_store(uri: str) -> None:
    """Refuses a SQLite store whose file does not exist, which MLflow would otherwise create empty.

    Raises:
        UserError: no such file; the message says to run the pipeline first.
    """
    if uri.startswith("sqlite:///"):
        database = Path(uri.removeprefix("sqlite:///"))
        if not database.is_file():
            raise UserError(f"no MLflow store at {database}; {HINT}, or set MLFLOW_TRACKING_URI to your server")


def store_error(uri: str, error: Exception) -> UserError:
    """A broken, locked or unreachable store, in one line."""
    message = str(error).splitlines()[0][:200] if str(error) else ""
    return UserError(f"could not read the MLflow store {uri} ({type(error).__name__}: {message})")


def fetch_runs(uri: str, experiment: str) -> pd.DataFrame:
    """Every run of ``experiment`` in the store at ``uri``, oldest first, as MLflow's own frame (columns
    ``run_id``, ``status``, ``start_time``, ``params.*``, ``tags.*``, ``metrics.*``).

    Raises:
        UserError: the store does not exist, cannot be read, or has no such experiment or no runs.
    """
    import warnings

    require_store(uri)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import mlflow

            mlflow.set_tracking_uri(uri)
            if mlflow.get_experiment_by_name(experiment) is None:
                raise UserError(f"the MLflow store {uri} has no experiment {experiment!r}; {HINT}")
            runs = mlflow.search_runs(
                experiment_names=[experiment], order_by=["attributes.start_time ASC"], output_format="pandas"
            )
    except UserError:
        raise
    except Exception as error:  # a broken, locked or unreachable store
        raise store_error(uri, error) from None
    if runs.empty:
        raise UserError(f"experiment {experiment!r} in {uri} has no runs yet; {HINT}")
    return runs


def runs_page(uri: str, experiment: str, ui: str = UI) -> str:
    """The address of ``experiment``'s runs page in MLflow's UI, in its model-training workspace
    (``<ui>/#/experiments/<id>/runs?workflowType=machine_learning``). MLflow 3.17's UI opens an experiment in its
    GenAI workspace (traces, latency, tokens) unless the address's ``workflowType`` says otherwise: its bundled
    ``main.*.js`` reads that search parameter, ``genai`` or ``machine_learning``, before the choice it remembers.

        Raises:
            UserError: the store does not exist (run the pipeline first), cannot be read, or lacks the experiment.
    """
    import warnings

    require_store(uri)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from mlflow import MlflowClient

            found = MlflowClient(tracking_uri=uri).get_experiment_by_name(experiment)
    except Exception as error:  # a broken, locked or unreachable store
        raise store_error(uri, error) from None
    if found is None:
        raise UserError(f"the MLflow store {uri} has no experiment {experiment!r}; {HINT}")
    return f"{ui}/#/experiments/{found.experiment_id}/runs?workflowType=machine_learning"


def runs_table(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per trained model (a seed's nested run, or a stage's run without nested runs): names, tags, the
    key params of its stage (logged on the stage's run, which nested runs inherit), final test accuracy and
    wall time."""
    by_id = runs.set_index("run_id")
    parents = set(runs.get("tags.mlflow.parentRunId", pd.Series(dtype=object)).dropna())
    rows = []
    for _, run in runs[~runs["run_id"].isin(parents)].iterrows():
        parent_id = run.get("tags.mlflow.parentRunId")
        parent = by_id.loc[parent_id] if isinstance(parent_id, str) and parent_id in by_id.index else run

        def param(key: str, run=run, parent=parent):
            value = run.get(f"params.{key}")
            return parent.get(f"params.{key}") if not isinstance(value, str) else value

        def tag(key: str, default: str = "", run=run):
            value = run.get(f"tags.{key}")
            return value if isinstance(value, str) else default

        stage, preset = tag("stage"), tag("preset")
        row = {
            "run": tag("mlflow.runName"),
            "stage": stage,
            "seed": int(tag("seed")) if tag("seed").lstrip("-").isdigit() else None,
            "arm": tag("arm", tag("source")),
            "model": param(f"{preset}.model"),  # each preset's section names its from-scratch model "model"
        }
        # a stage's section, or its preset's subsection (train_scratch.offline.lr)
        row.update({key: param(f"{stage}.{key}") or param(f"{stage}.{preset}.{key}") for key in KEY_PARAMS})
        row.update(
            test_acc=run.get("metrics.final_test_acc", math.nan),  # the backbone logs pool_test_acc instead
            wall_time_s=run.get("metrics.wall_time_s", math.nan),
            status=run["status"],
            git_commit=tag("git_commit", "unknown")[:7],
            git_dirty=tag("git_dirty", "unknown"),
            dvc_experiment=tag("dvc_experiment", "workspace"),
            started=pd.Timestamp(run["start_time"]).tz_convert("UTC").strftime("%Y-%m-%d %H:%M"),
        )
        rows.append(row)
    table = pd.DataFrame(rows)
    table["seed"] = table["seed"].astype("Int64")
    return table


def summary_table(table: pd.DataFrame) -> pd.DataFrame:
    """Test accuracy mean ± sample std over seeds, per stage, arm, git commit, dirty flag and DVC experiment."""
    finished = table[table["status"] == "FINISHED"]
    grouped = finished.groupby(GROUP, sort=False, dropna=False)
    summary = grouped.agg(
        seeds=("seed", lambda s: ",".join(str(v) for v in sorted(s.dropna()))),
        runs=("run", "size"),
        test_acc_mean=("test_acc", "mean"),
        test_acc_std=("test_acc", "std"),
        started=("started", "max"),
    ).reset_index()
    summary["test_acc_std"] = summary["test_acc_std"].fillna(0.0)  # one seed: no spread
    summary["test_acc"] = [
        f"{m:.4f} ± {s:.4f}" for m, s in zip(summary["test_acc_mean"], summary["test_acc_std"], strict=True)
    ]
    return summary


def markdown(table: pd.DataFrame) -> str:
    """A GitHub markdown table (pandas' ``to_markdown``, through tabulate); missing values left blank."""
    return table.to_markdown(index=False, floatfmt=".4f", missingval="") + "\n"


def report(experiment: str, uri: str, table: pd.DataFrame, summary: pd.DataFrame) -> str:
    shown = summary[[*GROUP, "seeds", "test_acc", "started"]]
    return (
        f"# MLflow runs of {experiment}\n\nStore: `{uri}`. {len(table)} runs. Test accuracy is each run's final "
        "epoch on the whole test set (the backbone's: its pretraining pool's test split).\n\n"
        "## Test accuracy over seeds, by stage, arm, commit and DVC experiment\n\n"
        f"{markdown(shown)}\n## Every run\n\n{markdown(table)}"
    )


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = tool_parser("pipeline.tools.compare", __doc__)
    parser.add_argument("--ui", action="store_true", help=f"print the experiment's runs page at {UI} and exit")
    return parser.parse_args(argv)


@stage_main
def main() -> None:
    args = parse_args(sys.argv[1:])
    params = load_params()
    experiment, uri = f"vit-{params.preset}", tracking_uri()
    if args.ui:
        print(redact(f"compare: the runs of {experiment} in mlflow ui: {runs_page(uri, experiment)}"))
        return
    table = runs_table(fetch_runs(uri, experiment))
    summary = summary_table(table)
    text = report(experiment, uri, table, summary)
    buffer = io.StringIO()
    table.to_csv(buffer, index=False, lineterminator="\n")
    write_text(REPORTS / "compare.csv", buffer.getvalue())
    write_text(REPORTS / "compare.md", text)
    print(text)
    print(f"compare: wrote {REPORTS}/compare.md and {REPORTS}/compare.csv")


if __name__ == "__main__":
    main()
