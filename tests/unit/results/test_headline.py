"""pipeline.results.headline: the numbers `dvc metrics show` prints, counted and gathered from the detailed files."""

from __future__ import annotations

from pipeline.results.headline import count_numbers, pretraining_headline


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
