"""pipeline.results.stats: spreads over seeds, paired differences with their t interval, the curve's comparisons."""

from __future__ import annotations

import pytest

from pipeline.results.stats import spread


def test_spread_reports_mean_sample_std_and_seeds():
    assert spread([1.0, 2.0, 3.0]) == {"mean": 2.0, "std": 1.0, "per_seed": [1.0, 2.0, 3.0]}  # not the population 0.816
    assert spread([0.7]) == {"mean": 0.7, "std": 0.0, "per_seed": [0.7]}


def test_paired_difference_gives_the_t_interval_and_a_verdict_only_where_it_excludes_zero():
    from pipeline.results.stats import paired_difference

    # differences 0.1, 0.15, 0.2, 0.18, 0.17: mean 0.16, sd 0.038079, t(0.975, 4) = 2.7764
    result = paired_difference([0.5, 0.6, 0.7, 0.6, 0.65], [0.4, 0.45, 0.5, 0.42, 0.48])
    half = 2.7764451 * 0.0380788655 / 5**0.5
    assert result["mean"] == pytest.approx(0.16)
    assert (result["low"], result["high"]) == pytest.approx((0.16 - half, 0.16 + half), abs=1e-6)
    assert result["verdict"] == "ahead" and result["n"] == 5
    # the committed issue-11 headline: probe minus scratch +0.069, +0.0013, +0.0103 is level, not "ahead"
    level = paired_difference([0.069, 0.0013, 0.0103], [0.0, 0.0, 0.0])
    assert level["verdict"] == "level" and level["low"] < 0 < level["high"]
    assert paired_difference([0.3, 0.31], [0.5, 0.52])["verdict"] == "behind"
    with pytest.raises(ValueError, match="same seeds"):
        paired_difference([0.5], [0.5, 0.6])


def test_curve_comparisons_pair_every_stated_pair_at_every_shared_size():
    from pipeline.results.stats import COMPARISONS, curve_comparisons

    curve = {arm: {"10": {"per_seed": [0.4, 0.5]}, "25": {"per_seed": [0.5, 0.6]}} for arm in
             ("scratch", "cnn", "pixels", "linear", "finetune")}  # fmt: skip
    result = curve_comparisons(curve)
    assert set(result) == {f"{a}-{b}" for a, b in COMPARISONS}
    assert all(set(by_size) == {"10", "25"} and by_size["10"]["mean"] == 0 for by_size in result.values())
