"""pipeline.results.history: per-epoch records as CSV, their mean over seeds, and the files the plot stage reads
back."""

from __future__ import annotations

import pytest

from pipeline.results.history import FIELDS, history_csv, mean_over_seeds, read_history, write_histories

RUN_0 = [
    {"epoch": 1, "step": 3, "train_loss": 1.0986123, "train_acc": 0.25, "val_loss": 1.05, "val_acc": 1 / 3},
    {"epoch": 2, "step": 6, "train_loss": 0.5, "train_acc": 0.75, "val_loss": 0.9, "val_acc": 0.5},
]
RUN_1 = [
    {"epoch": 1, "step": 3, "train_loss": 0.9, "train_acc": 0.5, "val_loss": 0.95, "val_acc": 0.5},
    {"epoch": 2, "step": 6, "train_loss": 0.3, "train_acc": 1.0, "val_loss": 0.7, "val_acc": 1.0},
]


def test_the_csv_reads_back_as_the_records_to_six_significant_digits_without_extra_keys():
    text = history_csv(RUN_0)
    assert text.splitlines()[0] == ",".join(FIELDS)  # "step" is not a column
    assert text.splitlines()[1] == "1,1.09861,0.25,1.05,0.333333"
    for read, record in zip(read_history(text), RUN_0, strict=True):
        assert set(read) == set(FIELDS)
        assert read == pytest.approx({k: record[k] for k in FIELDS}, rel=1e-5)


def test_the_mean_over_seeds_is_per_epoch_and_refuses_runs_of_different_lengths():
    mean = mean_over_seeds({0: RUN_0, 1: RUN_1})
    assert [r["epoch"] for r in mean] == [1, 2]
    assert mean[1]["val_acc"] == pytest.approx(0.75) and mean[0]["train_loss"] == pytest.approx(0.99930615)
    with pytest.raises(ValueError):
        mean_over_seeds({0: RUN_0, 1: RUN_1[:1]})


def test_write_histories_writes_the_mean_for_dvc_plots_and_every_seed_for_the_plot_stage(tmp_path):
    seeds = write_histories(tmp_path, "scratch", {0: RUN_0, 1: RUN_1})
    assert seeds == tmp_path / "scratch_seeds.csv"
    rows = read_history(seeds.read_text())
    assert [(r["seed"], r["epoch"]) for r in rows] == [(0, 1), (0, 2), (1, 1), (1, 2)]
    mean = read_history((tmp_path / "scratch.csv").read_text())
    expected = [{k: r[k] for k in FIELDS} for r in mean_over_seeds({0: RUN_0, 1: RUN_1})]
    assert all(m == pytest.approx(e, rel=1e-5) for m, e in zip(mean, expected, strict=True))
