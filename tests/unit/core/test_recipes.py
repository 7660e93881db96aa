"""pipeline.core.recipes: each optimiser recipe checks its own values and names the key; a grid gives one recipe per
learning rate."""

from __future__ import annotations

import pytest

from pipeline.core.errors import ConfigError
from pipeline.core.recipes import EpochRecipe, GridOptimiser, Optimiser


def grid(**changes) -> GridOptimiser:
    values = dict(optimizer="adamw", lrs=[0.001, 0.003], weight_decay=0.05, schedule="plateau", warmup_fraction=0.1,
                  grad_clip=1.0) | changes  # fmt: skip
    return GridOptimiser(**values)


def test_a_grid_at_one_of_its_rates_is_that_optimiser():
    assert grid().at(0.003) == Optimiser("adamw", 0.003, 0.05, "plateau", 0.1, 1.0)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"lrs": [0.003, 0.001]}, r"data_hunger\.cnn\.lrs must be in increasing order"),
        ({"lrs": [0.001, 0.001]}, r"data_hunger\.cnn\.lrs must not repeat"),
        ({"lrs": []}, r"data_hunger\.cnn\.lrs must list positive, finite learning rates"),
        ({"warmup_fraction": 1.0}, r"data_hunger\.cnn\.warmup_fraction must be in \[0, 1\)"),
        ({"grad_clip": -1.0}, r"data_hunger\.cnn\.grad_clip must not be negative"),
    ],
)
def test_a_bad_grid_names_its_key_and_the_rule(changes, message):
    with pytest.raises(ConfigError, match=f"^params.yaml: {message}"):
        grid(**changes).validate("data_hunger.cnn")


def test_an_epoch_recipe_checks_its_optimiser_then_its_batch_and_epochs():
    recipe = EpochRecipe("adam", 0.001, 0.0, "none", 0.0, 0.0, batch_size=32, epochs=0)
    with pytest.raises(ConfigError, match=r"backbone\.epochs must be at least 1, got 0"):
        recipe.validate("backbone")
    with pytest.raises(ConfigError, match=r"backbone\.lr must be positive and finite"):
        EpochRecipe("adam", 0.0, 0.0, "none", 0.0, 0.0, batch_size=32, epochs=1).validate("backbone")
