"""pipeline.results.headline: the numbers `dvc metrics show` prints, counted and gathered from the detailed files."""

from __future__ import annotations

import math

import pytest

from pipeline.results.headline import count_numbers, pretraining_headline, pretraining_slopes


def test_count_numbers_counts_every_int_and_float_but_no_bool_string_or_null():
    value = {"a": 1, "b": [0.5, True, "0.7", None, {"c": 2.0, "d": [3, [4]]}], "e": {}, "f": False}
    assert count_numbers(value) == 5
    assert count_numbers(0) == 1 and count_numbers(True) == 0 and count_numbers([]) == 0


def test_the_pretraining_headline_keeps_the_headline_shots_of_every_size_and_is_empty_for_the_paper_preset():
    shots = {"10": {"mean": 0.6, "std": 0.1}, "25": {"mean": 0.9, "std": 0.0}}
    pretraining = {"vit": {"100": shots, "1000": {"10": {"mean": 0.7}, "25": {"mean": 0.8}}}, "resnet": {},
                   "pixels": shots}  # fmt: skip
    assert pretraining_headline(pretraining, 10) == {"vit": {"100": 0.6, "1000": 0.7}, "pixels": 0.6}
    assert pretraining_headline(pretraining, 25) == {"vit": {"100": 0.9, "1000": 0.8}, "pixels": 0.9}
    assert pretraining_headline({}, 10) == {}


def test_the_slopes_are_each_seeds_gain_per_decade_and_the_vit_minus_the_resnet_is_paired_by_seed():
    """Accuracies exactly linear in log10(images): each seed's slope is recovered, the ViT's minus the ResNet's is
    paired seed by seed (the seeds' common offsets cancel), and a steeper ViT reads as Figure 4's direction."""
    sizes, seeds = ["2100", "7000", "21000", "42000"], [0.01, -0.02, 0.03]
    vit_gain, resnet_gain = (
        {"5": [0.05, 0.06, 0.07], "25": [0.01, 0.015, 0.005]},
        {"5": [0.01, 0.02, 0.03], "25": [0.03] * 3},
    )

    def arm(gains):
        return {size: {n: {"per_seed": [0.4 + offset + gain * math.log10(int(size))
                                        for offset, gain in zip(seeds, gains[n], strict=True)]} for n in gains}
                for size in sizes}  # fmt: skip

    scale = {"vit": arm(vit_gain), "resnet": arm(resnet_gain), "pixels": {"5": {}, "25": {}}}
    slopes = pretraining_slopes(scale)
    assert slopes["vit"]["5"]["per_seed"] == pytest.approx(vit_gain["5"])
    assert slopes["resnet"]["25"]["mean"] == pytest.approx(0.03)
    assert slopes["vit-resnet"]["5"]["per_seed"] == pytest.approx([0.04, 0.04, 0.04])
    assert slopes["vit-resnet"]["5"]["verdict"] == "ahead" and slopes["vit-resnet"]["25"]["verdict"] == "behind"
    assert slopes["vit"]["25"]["verdict"] == "level"  # gains 0.01, 0.015, 0.005: no interval above 0 from 3 seeds
