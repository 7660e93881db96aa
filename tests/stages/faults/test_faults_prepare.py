"""Faults of the prepare stage's images (pipeline/data/images.py; issue 5's case 6): a truncated JPEG, an image over
the pixel cap, an unreadable image found halfway."""

from __future__ import annotations

import shutil

from fault_project import assert_fails, good_folder
from helpers import digest_tree, png_claiming, truncated_jpeg
from project_copy import set_params


def test_truncated_jpeg_stops_prepare_naming_the_file(bare, tmp_path):
    folder = good_folder(tmp_path / "mine")
    (folder / "train/alpha/cut.jpg").write_bytes(truncated_jpeg())
    set_params(bare.repo, paper={"folder": str(folder)})
    bare.ok("download")
    line = assert_fails(bare.stage("prepare"), "prepare", "data/raw/images/train/alpha/cut.jpg", "not a readable image")
    assert "remove or replace it" in line
    prepared = bare.repo / "data/prepared"
    assert not (prepared / "manifest.csv").exists() and not (prepared / "info.json").exists()


def test_an_image_over_the_pixel_cap_stops_prepare_from_its_header_naming_file_size_and_cap(bare, tmp_path):
    folder = good_folder(tmp_path / "mine")
    (folder / "train/alpha/bomb.png").write_bytes(png_claiming(15000, 15000))  # 225 megapixels, a few hundred bytes
    set_params(bare.repo, paper={"folder": str(folder)})
    bare.ok("download")
    line = assert_fails(
        bare.stage("prepare"), "prepare", "data/raw/images/train/alpha/bomb.png", "15000x15000 = 225,000,000 pixels",
        "over the cap of 89,478,485", "images.max_pixels",
    )  # fmt: skip
    assert "DecompressionBomb" not in line
    prepared = bare.repo / "data/prepared"
    assert not (prepared / "manifest.csv").exists() and not (prepared / "info.json").exists()


def test_unreadable_image_found_halfway_leaves_the_previous_prepared_data_whole(bare, tmp_path):
    """prepare writes the train split before it reaches test/; a failure there must not leave a mix."""
    set_params(bare.repo, paper={"folder": str(good_folder(tmp_path / "mine"))})
    bare.ok("download")
    bare.ok("prepare")
    prepared = bare.repo / "data/prepared"
    before = digest_tree(prepared)
    raw = bare.repo / "data/raw/images"
    shutil.copy(raw / "train/alpha/0.png", raw / "train/alpha/extra.png")  # the new train split would differ
    (raw / "test/beta/cut.jpg").write_bytes(truncated_jpeg())
    assert_fails(bare.stage("prepare"), "prepare", "data/raw/images/test/beta/cut.jpg", "not a readable image")
    assert digest_tree(prepared) == before
    assert not [p for p in prepared.parent.iterdir() if p.name.endswith(".partial")]
