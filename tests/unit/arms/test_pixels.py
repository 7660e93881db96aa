"""pipeline.arms.pixels: the few-shot probe on raw pixels, run for one seed on sets held in memory."""

from __future__ import annotations

import pytest
import torch
from helpers import CPU, params_with

from pipeline.arms import pixels
from pipeline.arms.protocol import Curve, Point
from pipeline.data.images import ImageSet
from pipeline.models.probe import accuracy, fit_probe, flat_pixels, targets


def brightness_set(per_class: int, seed: int) -> ImageSet:
    """Three classes told apart by brightness alone: dark, grey, bright 4 x 4 greyscale images."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.arange(3).repeat_interleave(per_class)
    images = (labels * 100).view(-1, 1, 1, 1) + torch.randint(0, 40, (len(labels), 1, 4, 4), generator=generator)
    return ImageSet(images.to(torch.uint8), labels, ["dark", "grey", "bright"], (0.5,), (0.25,))


def test_one_seeds_probe_is_the_probe_on_that_seeds_normalised_pixels_and_scores_the_test_set():
    params = params_with()
    curve = Curve("offline", "tiny", "tiny", "supervised", params.data_hunger, 256, CPU)
    val, test = brightness_set(2, seed=1), brightness_set(5, seed=2)
    data = Point(n=3, num_classes=3, pool=brightness_set(6, seed=0), val=val, test=test, prepare=None, score=None,
                 val_features=flat_pixels(val), test_features=flat_pixels(test))  # fmt: skip
    record = pixels.run_seed(curve, data, seed=0)
    assert record["trained_parameters"] == 3 * 16 + 3  # a (K, C*H*W) weight and K biases
    assert record["reg"] in params.data_hunger.probe_regs
    train_set = pixels.seed_subset(data.pool, 3, 0)
    probe = fit_probe(flat_pixels(train_set), train_set.labels, data.val_features, val.labels, 3,
                      params.data_hunger.probe_regs)  # fmt: skip
    assert (record["reg"], record["val_acc"]) == (probe.reg, probe.val_acc)
    residual = probe.logits(flat_pixels(train_set)).double() - targets(train_set.labels, 3)
    assert record["train_loss"] == pytest.approx(residual.pow(2).mean().item())  # the same features, normalised
    test_acc = accuracy(probe.logits(data.test_features), test.labels)
    assert record["score"]() == {"test_acc": test_acc} and test_acc > 0.5  # chance is 1/3
    other = pixels.run_seed(curve, data, seed=1)  # another seed draws other images from the pool
    assert other["train_loss"] != record["train_loss"]
