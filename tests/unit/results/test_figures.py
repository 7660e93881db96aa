"""pipeline.results.figures: legend numbers, and the ablation's per-epoch CSV that `dvc plots` and the plot stage
read."""

from __future__ import annotations

import pytest

from pipeline.results.figures import SERIES, epochs_csv, parameter_count, read_epochs_csv


def test_parameter_counts_read_in_millions_from_100000_and_in_full_below():
    assert parameter_count(1_198_979) == "1.2M"
    assert parameter_count(85_800_963) == "86M"
    assert parameter_count(100_000) == "0.1M"
    assert parameter_count(99_999) == "99,999" and parameter_count(387) == "387"


def test_the_ablation_csv_reads_back_per_variant_and_series_with_epoch_zero_lossless():
    start = {"weight_rms": 0.06, "attention0_rms": 0.05}  # epoch 0: the initialisation
    epochs = {
        "adamw": [start, dict(zip(SERIES, (0.04, 0.03, 1.1, 1.0), strict=True))],
        "adam_l2": [start, dict(zip(SERIES, (0.001, 0.002, 1.09, 1.1), strict=True))],
    }
    text = epochs_csv(epochs)
    assert text.splitlines()[0] == "epoch," + ",".join(f"{v}_{s}" for v in epochs for s in SERIES)
    series = read_epochs_csv(text)
    assert series["epoch"] == [0.0, 1.0]
    assert series["adamw_train_loss"] == [None, pytest.approx(1.1)]  # epoch 0, the initialisation, has no loss
    assert series["adam_l2_weight_rms"] == [pytest.approx(0.06), pytest.approx(0.001)]
