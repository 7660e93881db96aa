"""pipeline.train.schedule: warmup, cosine decay, and the plateau schedule's cooldown."""

from __future__ import annotations

import pytest
from helpers import recipe_for

from pipeline.train.schedule import lr_factor

# --- engine: evaluation ----------------------------------------------------------------------


def test_lr_factor_warms_up_linearly_then_decays_by_cosine_to_zero():
    recipe = recipe_for(100, 1, lr=1.0, batch_size=1, schedule="cosine", warmup_fraction=0.1)
    factors = [lr_factor(step, 100, recipe) for step in range(100)]
    assert factors[:10] == pytest.approx([(i + 1) / 10 for i in range(10)])
    assert factors[10] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(factors[10:], factors[11:], strict=False))
    assert factors[55] == pytest.approx(0.5, abs=0.02)
    assert factors[-1] < 1e-3


def test_lr_factor_without_schedule_is_one_after_warmup():
    recipe = recipe_for(40, 1, lr=1.0, batch_size=1, schedule="none", warmup_fraction=0.25)
    factors = [lr_factor(step, 40, recipe) for step in range(40)]
    assert factors[0] == pytest.approx(0.1)
    assert factors[9:] == [1.0] * 31
    assert [lr_factor(s, 40, recipe_for(40, 1, lr=1.0, batch_size=1)) for s in range(40)] == [1.0] * 40


def test_the_cooldown_decays_linearly_over_its_fraction_of_the_steps_before_it_in_whole_scoring_intervals():
    from pipeline.train.schedule import Cooldown

    cooldown = Cooldown(0.2)
    assert cooldown.factor(50) == 1.0 and not cooldown.over(10**6)  # constant until begun
    cooldown.begin(100, eval_every=8)  # 0.2 x 100 = 20 steps, rounded up to 3 intervals of 8
    assert (cooldown.start, cooldown.steps) == (100, 24)
    assert [cooldown.factor(s) for s in (100, 106, 112, 124, 130)] == [1.0, 0.75, 0.5, 0.0, 0.0]
    assert not cooldown.over(123) and cooldown.over(124)
