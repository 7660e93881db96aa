"""Sizes in params.yaml checked against what the data holds: a size a class cannot give is refused, naming the key."""

from __future__ import annotations

import pytest
import torch
from helpers import params_with, raw_params, tiny_params

from pipeline.core.errors import UserError
from pipeline.core.params_yaml import parse_params
from pipeline.data import subsets as curve
from pipeline.data.images import ImageSet


def image_set(per_class: list[int], classes=("Pullover", "Coat", "Shirt")) -> ImageSet:
    labels = torch.cat([torch.full((n,), k, dtype=torch.int64) for k, n in enumerate(per_class)])
    return ImageSet(torch.zeros(len(labels), 1, 2, 2, dtype=torch.uint8), labels, list(classes), (0.0,), (1.0,))


def test_a_size_over_a_class_s_count_is_refused_naming_the_key_the_class_and_the_most_it_can_be():
    pool = image_set([5900, 5899, 5900])
    with pytest.raises(UserError) as caught:
        curve.seed_subset(pool, 5900, 0, curve.SEED_ARMS_KEY)
    assert str(caught.value) == (
        "params.yaml: offline.train_per_class asks for 5900 images per class but class 'Coat' has only 5899 left "
        "once validation.offline_per_class are held out; lower offline.train_per_class to at most 5899"
    )
    assert len(curve.seed_subset(pool, 5899, 0, curve.SEED_ARMS_KEY)) == 3 * 5899
    assert len(curve.seed_subset(pool, 5900, 0)) == 5900 * 2 + 5899  # no key (the paper sweep): clipped per class


@pytest.mark.parametrize("key", [curve.SHOTS_KEY, curve.POOL_KEY])
def test_shots_and_pool_sizes_over_the_pool_are_refused(key):
    with pytest.raises(UserError, match=rf"params.yaml: {key} asks for 11 images per class .* at most 10$"):
        curve.seed_subset(image_set([10, 12, 30]), 11, 0, key)


def test_the_committed_sizes_fit_the_real_data():
    """Fashion-MNIST: 6000 training images per class; validation.offline_per_class of each target class held out."""
    params = parse_params(raw_params())
    left = image_set([6000 - params.validation.offline_per_class] * 3)
    pool = image_set([6000] * 7, classes=[f"c{k}" for k in range(7)])
    curve.require_per_class(left, params.seed_arms_per_class, curve.SEED_ARMS_KEY)
    curve.require_per_class(left, max(params.pretraining_scale.shots), curve.SHOTS_KEY)
    curve.require_per_class(pool, max(params.pretraining_scale.pool_per_class), curve.POOL_KEY)


def test_pretrain_scale_refuses_too_many_shots_before_it_trains_anything(monkeypatch):
    from pipeline.stages import pretrain_scale

    params = params_with(pretraining_scale={"shots": [5, 10, 25, 5901]})
    monkeypatch.setattr(pretrain_scale, "load_split", lambda path: image_set([6000] * 7, [f"c{k}" for k in range(7)]))
    monkeypatch.setattr(pretrain_scale, "sweep_train_set", lambda preset, view: image_set([5900] * 3))
    monkeypatch.setattr(pretrain_scale, "pretrain_on_pool", lambda *a, **k: pytest.fail("trained before checking"))
    with pytest.raises(UserError, match=r"pretraining_scale.shots asks for 5901 .* at most 5900"):
        pretrain_scale.run_item(params, "resnet", 0)


def test_sizes_per_preset():
    labels = torch.tensor([0] * 6 + [1] * 6 + [2] * 5)
    assert curve.sweep_sizes(tiny_params().data_hunger, "paper", labels, 3) == [1, 2, 3, 4, 6]  # x largest class, 6
    offline = params_with(data_hunger={"offline_sizes": [1, 2, 3, 4, 6]})
    assert curve.sweep_sizes(offline.data_hunger, "offline", labels[:12], 2) == [1, 2, 3, 4, 6]
    with pytest.raises(UserError, match="smallest class has 5"):
        curve.sweep_sizes(offline.data_hunger, "offline", labels, 3)
    with pytest.raises(UserError, match="same set"):
        curve.sweep_sizes(tiny_params(paper_fractions=[0.1, 0.11, 0.5, 0.6, 1.0]).data_hunger, "paper", labels, 3)
