"""pipeline.data.fractals: formula-driven categories of iterated function systems, rendered deterministically."""

from __future__ import annotations

import dataclasses

import numpy as np

from pipeline.data.fractals import FractalSpec, categories, contractive, filling_rate, render_categories

SPEC = FractalSpec(seed=3, categories=6, per_category=24, points=800)


def test_every_categorys_maps_shrink_and_its_attractor_fills_the_image_within_the_bounds():
    params, active = categories(SPEC)
    assert params.shape == (6, SPEC.maps[1], 6) and active.shape == (6, SPEC.maps[1])
    assert all(SPEC.maps[0] <= n <= SPEC.maps[1] for n in active.sum(axis=1))
    assert contractive(params)[active].all()  # the chaos game has an attractor
    images = render_categories(SPEC, params, active, range(6))
    assert images.shape == (6 * 24, 1, 28, 28) and images.dtype == np.uint8
    fill = filling_rate(images[:, 0]).reshape(6, 24).mean(axis=1)
    assert (fill > 0.05).all() and (fill < 0.9).all()  # neither a dot nor a blur, instances included


def test_the_same_seed_gives_the_same_bytes_and_a_category_does_not_depend_on_the_others():
    params, active = categories(SPEC)
    again, _ = categories(SPEC)
    assert np.array_equal(params, again)
    more = dataclasses.replace(SPEC, categories=9)  # more categories: the first six are the same systems
    assert np.array_equal(categories(more)[0][:6], params)
    together = render_categories(SPEC, params, active, range(2, 6))  # a batch of four categories
    alone = render_categories(SPEC, params, active, range(4, 5))
    assert np.array_equal(together[2 * 24 : 3 * 24], alone)  # category 4's bytes, whatever shares its batch
    other_seed = categories(dataclasses.replace(SPEC, seed=4))[0]
    assert not np.array_equal(other_seed, params)


def test_instances_vary_within_a_category_and_a_classifier_tells_the_categories_apart():
    params, active = categories(SPEC)
    images = render_categories(SPEC, params, active, range(6)).reshape(6, 24, -1)
    assert all(len({image.tobytes() for image in images[c]}) == 24 for c in range(6))  # no two instances alike
    # nearest class mean on pixels, fit on 16 instances per category, scored on the other 8 of each
    train, test = images[:, :16].astype(float), images[:, 16:].astype(float)
    means = train.mean(axis=1)  # (6, 784)
    distances = ((test[:, :, None, :] - means[None, None]) ** 2).sum(axis=-1)  # (6, 8, 6)
    accuracy = (distances.argmin(axis=-1) == np.arange(6)[:, None]).mean()
    assert accuracy > 0.5  # chance is 1/6
