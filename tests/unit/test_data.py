"""pipeline.data: image sets, augmentation, subsets, image folders and decoding."""

from __future__ import annotations

import io
import os
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pipeline.data import (
    ImageSet,
    augment,
    decode_image,
    list_image_folder,
    load_split,
)
from pipeline.errors import UserError

# --- data ------------------------------------------------------------------------------------


def test_augment_keeps_shape_and_dtype_is_seeded_and_only_shifts_and_flips():
    images = torch.randint(1, 256, (16, 3, 8, 8), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    out = augment(images, torch.Generator().manual_seed(1))
    assert out.shape == images.shape and out.dtype == torch.uint8
    assert torch.equal(out, augment(images, torch.Generator().manual_seed(1)))
    assert not torch.equal(out, augment(images, torch.Generator().manual_seed(2)))
    assert any(not torch.equal(o, i) for o, i in zip(out, images, strict=True))
    # every output is one of the 5 x 5 shifts (zero padding 2) of the image or of its mirror image
    padded = F.pad(images, (2, 2, 2, 2))
    for image, result in zip(padded, out, strict=True):
        candidates = [
            view[:, dy : dy + 8, dx : dx + 8] for view in (image, image.flip(-1)) for dy in range(5) for dx in range(5)
        ]
        assert any(torch.equal(result, c) for c in candidates)


def test_normalise_maps_0_and_255_to_standardised_values():
    mean, std = (0.5, 0.4, 0.3), (0.2, 0.25, 0.5)
    images = torch.zeros(2, 3, 4, 4, dtype=torch.uint8)
    images[1] = 255
    out = ImageSet(images, torch.zeros(2, dtype=torch.int64), ["a"], mean, std).normalise(images)
    assert out.dtype == torch.float32
    for c in range(3):
        assert torch.allclose(out[0, c], torch.tensor((0 - mean[c]) / std[c]))
        assert torch.allclose(out[1, c], torch.tensor((1 - mean[c]) / std[c]))


def test_image_set_rejects_float_images_and_mismatched_labels():
    with pytest.raises(ValueError, match="uint8"):
        ImageSet(torch.zeros(2, 1, 4, 4), torch.zeros(2, dtype=torch.int64), ["a"], (0.5,), (0.5,))
    with pytest.raises(ValueError, match="2 images but 3 labels"):
        ImageSet(torch.zeros(2, 1, 4, 4, dtype=torch.uint8), torch.zeros(3, dtype=torch.int64), ["a"], (0.5,), (0.5,))


def test_image_set_save_load_round_trip(tmp_path):
    images = torch.randint(0, 256, (5, 1, 6, 6), dtype=torch.uint8)
    original = ImageSet(images, torch.tensor([0, 1, 2, 1, 0]), ["x", "y", "z"], (0.286,), (0.353,))
    original.save(tmp_path / "split.pt")
    loaded = load_split(tmp_path / "split.pt")
    assert torch.equal(loaded.images, original.images) and torch.equal(loaded.labels, original.labels)
    assert loaded.labels.dtype == torch.int64
    assert (loaded.classes, loaded.mean, loaded.std) == (["x", "y", "z"], (0.286,), (0.353,))


def test_load_split_of_a_missing_file_says_run_dvc_repro(tmp_path):
    with pytest.raises(UserError, match="dvc repro"):
        load_split(tmp_path / "train.pt")


def make_image_folder(root: Path, layout: dict[str, dict[str, int]]) -> None:
    for split, classes in layout.items():
        for name, count in classes.items():
            (root / split / name).mkdir(parents=True)
            for i in range(count):
                (root / split / name / f"{i}.jpg").write_bytes(b"")


def test_list_image_folder_sorts_classes_and_pairs_files_with_labels(tmp_path):
    make_image_folder(tmp_path, {"train": {"sushi": 2, "pizza": 1}, "test": {"pizza": 1, "sushi": 1}})
    (tmp_path / "train" / "pizza" / ".DS_Store").write_bytes(b"")  # hidden files and folders are not data
    (tmp_path / "train" / ".cache").mkdir()
    (tmp_path / "train" / "sushi" / "Thumbs.db").write_bytes(b"\0")  # not images: skipped, as ImageFolder does
    (tmp_path / "test" / "pizza" / "README.txt").write_text("photos by ...")
    classes, pairs = list_image_folder(tmp_path)
    assert classes == ["pizza", "sushi"]
    assert pairs["train"] == [
        (tmp_path / "train" / "pizza" / "0.jpg", 0),
        (tmp_path / "train" / "sushi" / "0.jpg", 1),
        (tmp_path / "train" / "sushi" / "1.jpg", 1),
    ]
    assert pairs["test"] == [(tmp_path / "test" / "pizza" / "0.jpg", 0), (tmp_path / "test" / "sushi" / "0.jpg", 1)]


@pytest.mark.parametrize(
    ("layout", "named"),
    [
        ({"train": {"a": 1}}, ["test"]),
        ({"train": {"a": 1, "b": 0}, "test": {"a": 1, "b": 1}}, [os.path.join("train", "b")]),
        ({"train": {"a": 1, "b": 1}, "test": {"a": 1, "c": 1}}, ["'b'", "'c'"]),
    ],
    ids=["missing-test", "empty-class", "different-classes"],
)
def test_list_image_folder_rejects_bad_trees_naming_the_folder(tmp_path, layout, named):
    make_image_folder(tmp_path, layout)
    with pytest.raises(UserError) as caught:
        list_image_folder(tmp_path)
    for text in named:
        assert text in str(caught.value)
    if "'b'" not in named:
        assert str(tmp_path) in str(caught.value)


def write_image(path: Path, colour=(200, 100, 50), size=(40, 30), fmt: str | None = None) -> None:
    from PIL import Image

    Image.new("RGB", size, colour).save(path, format=fmt)


def pixels(*channels: int) -> torch.Tensor:
    """A (C, 1, 1) uint8 pixel, to compare a whole decoded image with."""
    return torch.tensor(channels, dtype=torch.uint8).view(-1, 1, 1)


@pytest.mark.parametrize("mode", ["resize", "crop"])
def test_decode_image_gives_uint8_square_rgb_or_grey(tmp_path, mode):
    path = tmp_path / "photo.png"
    write_image(path)
    rgb = decode_image(path, 16, mode, channels=3, max_pixels=10**6)
    assert rgb.shape == (3, 16, 16) and rgb.dtype == torch.uint8
    assert torch.equal(rgb, pixels(200, 100, 50).expand(3, 16, 16))  # a flat colour stays flat, channel order kept
    grey = decode_image(path, 16, mode, channels=1, max_pixels=10**6)
    assert grey.shape == (1, 16, 16) and grey.dtype == torch.uint8
    assert torch.equal(grey, pixels(124).expand(1, 16, 16))  # ITU-R 601 luma of (200, 100, 50): 124.2


def test_decode_image_crop_takes_the_centre(tmp_path):
    from PIL import Image

    path = tmp_path / "wide.png"
    image = Image.new("RGB", (90, 30), (255, 0, 0))
    image.paste((0, 0, 255), (30, 0, 60, 30))  # blue middle third, red sides
    image.save(path)
    cropped = decode_image(path, 16, "crop", channels=3, max_pixels=10**6)
    # resized to 54 x 18, the centre 16 columns come from source columns 30..59 only: pure blue
    assert torch.equal(cropped, pixels(0, 0, 255).expand(3, 16, 16))
    squashed = decode_image(path, 16, "resize", channels=3, max_pixels=10**6)
    # resize keeps the red sides: columns 0-3 (and 12-15) draw on source columns 0..25 (64..89) only,
    # columns 6-9 on 31..58 only; the columns between blend the two
    red, blue = pixels(255, 0, 0), pixels(0, 0, 255)
    assert torch.equal(squashed[:, :, :4], red.expand(3, 16, 4))
    assert torch.equal(squashed[:, :, 12:], red.expand(3, 16, 4))
    assert torch.equal(squashed[:, :, 6:10], blue.expand(3, 16, 4))


def test_decode_image_rejects_truncated_jpeg_and_non_image_naming_the_file(tmp_path):
    from PIL import Image

    full = io.BytesIO()
    noise = np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    Image.fromarray(noise).save(full, format="JPEG", quality=95)
    truncated = tmp_path / "cut.jpg"
    truncated.write_bytes(full.getvalue()[: len(full.getvalue()) // 2])
    text = tmp_path / "x.jpg"
    text.write_text("not an image\n")
    for path in (truncated, text):
        with pytest.raises(UserError, match=re.escape(str(path))):
            decode_image(path, 16, "resize", channels=3, max_pixels=10**6)
    whole = tmp_path / "whole.jpg"
    whole.write_bytes(full.getvalue())
    assert decode_image(whole, 16, "resize", channels=3, max_pixels=10**6).shape == (
        3,
        16,
        16,
    )  # only the cut one fails
