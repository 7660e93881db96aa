"""pipeline.core.pretraining: the pretraining sections, issue 38's synthetic study among them."""

from __future__ import annotations

import pytest
from helpers import params_with

from pipeline.core.errors import ConfigError


def test_the_committed_synthetic_study_spans_two_decades_with_equal_steps_at_every_size():
    synthetic = params_with().synthetic
    sizes = [synthetic.categories * n for n in synthetic.per_category]
    assert sizes[-1] / sizes[0] >= 100  # issue 38: three or more sizes spanning two decades
    assert len(sizes) >= 3 and synthetic.points == list(range(len(sizes)))
    assert synthetic.steps % synthetic.scores == 0


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("per_category", [100, 10, 1000], "synthetic.per_category must be positive and strictly increasing"),
        ("per_category", [0, 10, 100], "synthetic.per_category must be positive"),
        ("points", [0, 1], "synthetic.points must be 0, 1, ..., n-1 with one size per point"),
        ("categories", 1, "synthetic.categories must be at least 2"),
        ("held_out_per_category", 0, "synthetic.held_out_per_category must be at least 1"),
        ("scores", 7, r"synthetic.scores must divide synthetic.steps \(4000\)"),
        ("scores", 0, "synthetic.scores must divide"),
        ("min_held_out_acc", 1.0, r"synthetic.min_held_out_acc must be in \[0, 1\)"),
        ("seed", -1, "synthetic.seed must be from 0 to 4294967295"),
    ],
)
def test_a_bad_synthetic_value_is_named_with_what_it_must_be(key, value, message):
    with pytest.raises(ConfigError, match=message):
        params_with(synthetic={key: value})


def test_the_primary_shots_must_be_a_probe_size_of_the_axis_checked_when_params_load():
    with pytest.raises(
        ConfigError, match=r"synthetic.primary_shots must be one of pretraining_scale.shots \[5, 10, 25\]"
    ):
        params_with(synthetic={"primary_shots": 7})


def test_an_unknown_synthetic_key_is_refused():
    with pytest.raises(ConfigError, match="synthetic"):
        params_with(synthetic={"size": 10})
