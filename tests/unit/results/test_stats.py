"""pipeline.results.stats: spreads over seeds, paired differences with their t interval, the curve's comparisons."""

from __future__ import annotations

import pytest

from pipeline.results.stats import paired_difference, spread


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


def test_the_p_value_is_below_005_exactly_where_the_95_interval_excludes_zero():
    from pipeline.results.stats import paired_p_value

    for differences in ([0.01, 0.03, 0.02, 0.04, 0.0], [0.05, -0.01, 0.02, 0.0, 0.03], [-0.02, -0.03, -0.01, -0.025]):
        interval = paired_difference(differences, [0.0] * len(differences))
        assert (paired_p_value(differences) < 0.05) == (interval["verdict"] != "level")
    assert paired_p_value([0.1]) == 1.0 and paired_p_value([0.0, 0.0]) == 1.0 and paired_p_value([0.2, 0.2]) == 0.0


def test_holm_keeps_a_clear_difference_and_drops_one_that_only_passes_alone():
    from pipeline.results.stats import holm_verdicts, paired_p_value, with_holm

    clear, borderline = [0.10, 0.11, 0.09, 0.10, 0.12], [0.03, 0.005, 0.02, 0.04, 0.015]
    assert paired_p_value(borderline) < 0.05  # nominally ahead on its own
    noise = {str(n): paired_difference([0.01 * ((n * 7) % 5 - 2)] * 2 + [0.0] * 3, [0.0] * 5) for n in range(10)}
    family = {"a-b": {"1": paired_difference(clear, [0.0] * 5), "2": paired_difference(borderline, [0.0] * 5)},
              "c-d": noise}  # fmt: skip
    verdicts = holm_verdicts(family)
    assert verdicts["a-b"] == {"1": "ahead", "2": "level"}  # 12 comparisons: 0.05 / 11 is below its p
    assert holm_verdicts({"a-b": {"2": family["a-b"]["2"]}}) == {"a-b": {"2": "ahead"}}  # alone, it stands
    cell = with_holm(family)["a-b"]["2"]
    assert cell["holm"] == "level" and cell["verdict"] == "ahead" and cell["p"] == paired_p_value(borderline)


def test_the_primary_family_gets_holm_over_itself_alone_beside_the_whole_familys():
    from pipeline.results.stats import with_holm

    clear, borderline = [0.10, 0.11, 0.09, 0.10, 0.12], [0.03, 0.005, 0.02, 0.04, 0.015]
    noise = {str(n): paired_difference([0.01 * ((n * 7) % 5 - 2)] * 2 + [0.0] * 3, [0.0] * 5) for n in range(10)}
    family = {"a-b": {"1": paired_difference(clear, [0.0] * 5), "2": paired_difference(borderline, [0.0] * 5)},
              "c-d": noise}  # fmt: skip
    marked = with_holm(family, primary={"a-b": ["1", "2"]})
    assert marked["a-b"]["2"]["holm"] == "level"  # among 12 it falls
    assert marked["a-b"]["2"]["holm_primary"] == "ahead"  # among the 2 named first it stands
    assert all("holm_primary" not in cell for cell in marked["c-d"].values())
    unmarked = {pair: {n: {k: v for k, v in cell.items() if k != "holm_primary"} for n, cell in by_size.items()}
                for pair, by_size in marked.items()}  # fmt: skip
    assert with_holm(family) == unmarked


def test_holm_on_the_previous_runs_curve_keeps_15_of_its_29_nominal_verdicts():
    """The count an outside review found by hand (issue 37) on the run before its rerun (kept in
    metrics/run_before_issue37/): 29 of 40 nominally ahead or behind, 15 after Holm."""
    import json
    from pathlib import Path

    from pipeline.results.stats import holm_verdicts

    curve = json.loads(
        (Path(__file__).resolve().parents[3] / "metrics/run_before_issue37/comparisons.json").read_text()
    )["curve"]
    nominal = sum(v["verdict"] != "level" for by_size in curve.values() for v in by_size.values())
    kept = sum(v != "level" for by_size in holm_verdicts(curve).values() for v in by_size.values())
    assert (sum(len(by_size) for by_size in curve.values()), nominal, kept) == (40, 29, 15)
