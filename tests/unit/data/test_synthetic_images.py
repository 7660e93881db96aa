"""pipeline.data.synthetic_images: issue 38's images rendered once, in blocks, and read back as nested sizes."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.core.errors import UserError
from pipeline.data import synthetic_images as synthetic
from pipeline.data.fractals import categories, render_categories
from pipeline.data.synthetic_images import SyntheticSet, generate, load_size, read_info, require_offline

WANTED = SyntheticSet(seed=3, categories=5, instances=6)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    folder = tmp_path_factory.mktemp("synthetic") / "set"
    return folder, generate(WANTED, folder)


def test_every_instance_is_the_generators_whatever_block_it_was_rendered_in(rendered, tmp_path, monkeypatch):
    folder, info = rendered
    stored = np.load(folder / synthetic.IMAGES)
    spec = WANTED.spec()
    params, active = categories(spec)
    expected = render_categories(spec, params, active, range(WANTED.categories))[:, 0].reshape(5, 6, 28, 28)
    assert stored.dtype == np.uint8 and np.array_equal(stored, expected)
    monkeypatch.setattr(synthetic, "BLOCK_IMAGES", 6)  # one category a block: memory bounded by the block
    generate(WANTED, tmp_path / "again")
    assert np.array_equal(np.load(tmp_path / "again" / synthetic.IMAGES), stored)
    scaled = stored / 255
    assert info["mean"] == pytest.approx(scaled.mean()) and info["std"] == pytest.approx(scaled.std())
    assert (info["images"], info["size"]) == (30, 28) and 0 < info["fill"]["min"] <= info["fill"]["max"] < 1


def test_a_size_is_the_first_instances_of_every_category_and_the_held_out_ones_are_the_last(rendered):
    folder, info = rendered
    stored = np.load(folder / synthetic.IMAGES)
    small, held_out = load_size(2, 4, 2, folder)
    large, _ = load_size(4, 4, 2, folder)
    assert small.images.shape == (10, 1, 28, 28) and small.labels.tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    assert np.array_equal(small.images[2:4, 0].numpy(), stored[1, :2])  # category 1's first two
    assert np.array_equal(large.images.view(5, 4, 28, 28)[:, :2].numpy(), small.images.view(5, 2, 28, 28).numpy())
    assert np.array_equal(held_out.images.view(5, 2, 28, 28).numpy(), stored[:, 4:])  # in no size
    assert small.classes == held_out.classes and len(small.classes) == 5
    assert (small.mean, small.std) == ((info["mean"],), (info["std"],))


def test_asking_more_than_was_rendered_or_reading_nothing_names_the_stage(rendered, tmp_path):
    folder, _ = rendered
    with pytest.raises(UserError, match="holds 6 instances per category, not the largest size's 5 \\+ 2 held out"):
        load_size(5, 5, 2, folder)
    with pytest.raises(UserError, match="or 5 is above the largest size"):
        load_size(5, 4, 2, folder)
    with pytest.raises(UserError, match="synthetic_data stage renders the images"):
        read_info(tmp_path / "missing")


def test_the_study_runs_on_the_offline_preset_only():
    require_offline("offline")
    with pytest.raises(UserError, match="set preset: offline"):
        require_offline("paper")
