"""Every MLflow run of the preset's experiment in one table, and test accuracy per code version and experiment.

    make compare        # = python -m pipeline.tools.compare

Reads the store of :func:`pipeline.tracking.tracking_uri` (``mlflow.db`` at the repository root, or
``MLFLOW_TRACKING_URI``), experiment ``vit-<preset>``. Writes ``reports/compare.md`` and
``reports/compare.csv`` and prints the markdown. The summary groups runs by stage, arm, git commit,
dirty flag and DVC experiment, and gives the test accuracy's mean ± sample std over their seeds.
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import pandas as pd

from pipeline.config import load_params
from pipeline.errors import UserError, stage_main
from pipeline.files import write_text
from pipeline.tracking import tracking_uri

REPORTS = Path("reports")
KEY_PARAMS = ("lr", "epochs", "batch_size")  # from the run's own stage section, e.g. train_scratch.offline.lr
GROUP = ["stage", "arm", "git_commit", "git_dirty", "dvc_experiment"]


def fetch_runs(uri: str, experiment: str) -> list:
    """Every run of ``experiment`` in the store at ``uri``, oldest first.

    Raises:
        UserError: the store does not exist, cannot be read, or has no such experiment or no runs.
    """
    import warnings

    hint = "run `dvc repro` (or `dvc exp run`) to record some"
    if uri.startswith("sqlite:///"):
        database = Path(uri.removeprefix("sqlite:///"))
        if not database.is_file():
            raise UserError(f"no MLflow store at {database}; {hint}, or set MLFLOW_TRACKING_URI to your server")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import mlflow

            client = mlflow.MlflowClient(tracking_uri=uri)
            found = client.get_experiment_by_name(experiment)
            if found is None:
                raise UserError(f"the MLflow store {uri} has no experiment {experiment!r}; {hint}")
            runs, token = [], None
            while True:
                page = client.search_runs(
                    [found.experiment_id], max_results=1000, page_token=token, order_by=["attributes.start_time ASC"]
                )
                runs += list(page)
                token = page.token
                if not token:
                    break
    except UserError:
        raise
    except Exception as error:  # a broken, locked or unreachable store
        message = str(error).splitlines()[0][:200] if str(error) else ""
        raise UserError(f"could not read the MLflow store {uri} ({type(error).__name__}: {message})") from None
    if not runs:
        raise UserError(f"experiment {experiment!r} in {uri} has no runs yet; {hint}")
    return runs


def runs_table(runs: list) -> pd.DataFrame:
    """One row per run: names, tags, key params, final test accuracy and wall time."""
    rows = []
    for run in runs:
        tags, params, metrics = run.data.tags, run.data.params, run.data.metrics
        stage = tags.get("stage", "")
        row = {
            "run": run.info.run_name,
            "stage": stage,
            "seed": int(tags["seed"]) if tags.get("seed", "").lstrip("-").isdigit() else None,
            "arm": tags.get("arm", tags.get("source", "")),
            "model": params.get("offline.model") if tags.get("preset") == "offline" else params.get("paper.model"),
        }
        preset = tags.get("preset", "")
        # a stage's section, or its preset's subsection (train_scratch.offline.lr)
        row.update({key: params.get(f"{stage}.{key}", params.get(f"{stage}.{preset}.{key}")) for key in KEY_PARAMS})
        row.update(
            {
                # the backbone stage logs per-epoch test_acc (on its pool) but no final_test_acc
                "test_acc": metrics.get("final_test_acc", metrics.get("test_acc", math.nan)),
                "wall_time_s": metrics.get("wall_time_s", math.nan),
                "status": run.info.status,
                "git_commit": tags.get("git_commit", "unknown")[:7],
                "git_dirty": tags.get("git_dirty", "unknown"),
                "dvc_experiment": tags.get("dvc_experiment", "workspace"),
                "started": pd.Timestamp(run.info.start_time, unit="ms", tz="UTC").strftime("%Y-%m-%d %H:%M"),
            }
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
    """A GitHub markdown table (pandas' ``to_markdown`` needs tabulate, which we do not depend on)."""

    def cell(value) -> str:
        if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
            return ""
        if isinstance(value, float):
            return f"{value:.4f}"
        return str(value).replace("|", "\\|")

    lines = ["| " + " | ".join(table.columns) + " |", "|" + "---|" * len(table.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in table.itertuples(index=False)]
    return "\n".join(lines) + "\n"


def report(experiment: str, uri: str, table: pd.DataFrame, summary: pd.DataFrame) -> str:
    shown = summary[[*GROUP, "seeds", "test_acc", "started"]]
    return (
        f"# MLflow runs of {experiment}\n\nStore: `{uri}`. {len(table)} runs. Test accuracy is each run's final "
        "epoch on the whole test set (the backbone's: its pretraining pool's test split).\n\n"
        "## Test accuracy over seeds, by stage, arm, commit and DVC experiment\n\n"
        f"{markdown(shown)}\n## Every run\n\n{markdown(table)}"
    )


@stage_main
def main() -> None:
    params = load_params()
    experiment, uri = f"vit-{params.preset}", tracking_uri()
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
