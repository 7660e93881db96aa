"""Per-epoch training records as CSV files for `dvc plots` and the plot stage."""

from __future__ import annotations

import csv
import io
import statistics
from pathlib import Path

from pipeline.core.files import write_text

FIELDS = ["epoch", "train_loss", "train_acc", "val_loss", "val_acc"]  # the arms: validation every epoch
POOL_FIELDS = ["epoch", "train_loss", "train_acc", "test_loss", "test_acc"]  # the backbone: its pool's test set


def history_csv(history: list[dict], fields: list[str] = FIELDS) -> str:
    """Records as CSV text with 6 significant digits (stable bytes across reruns)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    for record in history:
        writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in record.items()})
    return buffer.getvalue()


def with_seed(histories: dict[int, list[dict]]) -> list[dict]:
    """All seeds' records in one list, each with its ``seed``."""
    return [{"seed": seed, **record} for seed, history in histories.items() for record in history]


def mean_over_seeds(histories: dict[int, list[dict]]) -> list[dict]:
    """The per-epoch mean of every field over seeds."""
    runs = list(histories.values())
    return [
        {
            "epoch": records[0]["epoch"],
            **{k: statistics.fmean(r[k] for r in records) for k in records[0] if k != "epoch"},
        }
        for records in zip(*runs, strict=True)
    ]


def write_histories(folder: Path, arm: str, histories: dict[int, list[dict]]) -> Path:
    """``<arm>.csv`` (the per-epoch mean over seeds, for `dvc plots`) and ``<arm>_seeds.csv`` (every seed's
    records, for the plot stage) in ``folder``; returns the per-seed file."""
    write_text(Path(folder) / f"{arm}.csv", history_csv(mean_over_seeds(histories)))
    seeds = Path(folder) / f"{arm}_seeds.csv"
    write_text(seeds, history_csv(with_seed(histories), ["seed", *FIELDS]))
    return seeds


def read_history(text: str) -> list[dict]:
    return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(io.StringIO(text))]
