"""pipeline.data.images: image sets, augmentation, subsets, image folders and decoding."""

from __future__ import annotations

import io
import itertools
import os
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import grey_set, idx_bytes, png_claiming, truncated_jpeg

from pipeline.core import paths
from pipeline.core.errors import UserError
from pipeline.data import images as data
from pipeline.data.images import (
    ImageSet,
    augment,
    batch_preparer,
    decode_image,
    list_image_folder,
    load_split,
    prepare_image_folder,
)
from pipeline.data.presets.fashion_mnist import prepare_offline, read_idx
from pipeline.data.presets.image_folder import paper_views

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


# --- decoding what users actually have: EXIF, 16-bit, alpha, palettes, animation, disguised formats ----------


def decode(path: Path, channels: int = 3, size: int = 8, mode: str = "resize") -> torch.Tensor:
    return decode_image(path, size, mode, channels=channels, max_pixels=10**6)


def test_exif_orientation_is_applied(tmp_path):
    from PIL import Image

    image = Image.new("RGB", (40, 20), (255, 0, 0))
    image.paste((0, 0, 255), (0, 0, 20, 20))  # stored: blue left half, red right half
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 clockwise to view": the viewer sees blue on top
    path = tmp_path / "phone.jpg"
    image.save(path, exif=exif, quality=100)
    decoded = decode_image(path, 20, "crop", channels=3, max_pixels=10**6).int()
    top, bottom = decoded[:, :4].float().mean((1, 2)), decoded[:, -4:].float().mean((1, 2))
    assert top[2] > 200 and top[0] < 50, top  # blue on top
    assert bottom[0] > 200 and bottom[2] < 50, bottom


@pytest.mark.parametrize("mode", ["I;16", "I"])
def test_16_bit_grey_is_scaled_to_8_bits_not_clipped(tmp_path, mode):
    from PIL import Image

    path = tmp_path / "deep.png"
    Image.fromarray(np.full((10, 10), 32896, dtype=np.uint16)).save(path)  # 32896 / 257 = 128: mid grey
    with Image.open(path) as opened:
        assert opened.mode in ("I;16", "I")  # how Pillow reads a 16-bit grey PNG
    assert torch.equal(decode(path, channels=1), pixels(128).expand(1, 8, 8))
    assert torch.equal(decode(path, channels=3), pixels(128, 128, 128).expand(3, 8, 8))
    from pipeline.data.images import _to_8_bit

    wide = Image.fromarray(np.array([[0, 65535]], dtype=np.int32), mode="I") if mode == "I" else None
    if wide is not None:
        assert np.asarray(_to_8_bit(wide)).tolist() == [[0, 255]]


def test_float_grey_is_scaled_from_its_range():
    from PIL import Image

    from pipeline.data.images import _to_8_bit

    unit = Image.fromarray(np.array([[0.0, 0.5, 1.0]], dtype=np.float32), mode="F")
    assert np.asarray(_to_8_bit(unit)).tolist() == [[0, 128, 255]]
    other = Image.fromarray(np.array([[-10.0, 0.0, 10.0]], dtype=np.float32), mode="F")
    assert np.asarray(_to_8_bit(other)).tolist() == [[0, 128, 255]]


@pytest.mark.parametrize("mode", ["RGBA", "LA", "P"])
def test_transparent_pixels_are_composited_on_white(tmp_path, mode):
    from PIL import Image

    path = tmp_path / "logo.png"
    if mode == "P":
        image = Image.new("P", (8, 8), 0)
        image.putpalette([0, 0, 0] * 256)
        image.save(path, transparency=0)  # palette entry 0 (black) is transparent
    else:
        Image.new(mode, (8, 8), (0, 0, 0, 0) if mode == "RGBA" else (0, 0)).save(path)  # black, fully transparent
    assert torch.equal(decode(path), pixels(255, 255, 255).expand(3, 8, 8))
    assert torch.equal(decode(path, channels=1), pixels(255).expand(1, 8, 8))


def test_half_transparent_red_is_blended_with_white(tmp_path):
    from PIL import Image

    path = tmp_path / "tint.png"
    Image.new("RGBA", (8, 8), (255, 0, 0, 128)).save(path)
    assert torch.equal(decode(path), pixels(255, 127, 127).expand(3, 8, 8))


@pytest.mark.parametrize("mode", ["P", "CMYK", "1"])
def test_palette_cmyk_and_bilevel_images_are_converted(tmp_path, mode):
    from PIL import Image

    rgb = Image.new("RGB", (8, 8), (255, 255, 255) if mode == "1" else (200, 100, 50))
    path = tmp_path / ("x.jpg" if mode == "CMYK" else "x.png")
    converted = rgb.convert(mode, palette=Image.Palette.ADAPTIVE) if mode == "P" else rgb.convert(mode)
    converted.save(path, **({"quality": 100} if mode == "CMYK" else {}))
    decoded = decode(path).int()
    expected = (255, 255, 255) if mode == "1" else (200, 100, 50)
    assert (decoded - torch.tensor(expected).view(3, 1, 1)).abs().max() <= 3


def test_an_animated_gif_gives_its_first_frame_with_a_one_line_note(tmp_path, capsys):
    from PIL import Image

    path = tmp_path / "moving.gif"
    frames = [Image.new("RGB", (8, 8), colour) for colour in ((255, 0, 0), (0, 0, 255))]
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=100)
    decoded = decode(path).int()
    assert decoded[0].min() > 240 and decoded[2].max() < 16  # red: the first frame
    assert capsys.readouterr().err == f"note: {path} is animated (2 frames); using its first frame\n"


@pytest.mark.parametrize("fmt", ["TIFF", "EPS", "PPM", "ICO"])
def test_a_format_outside_the_allow_list_named_jpg_is_refused_by_its_content(tmp_path, monkeypatch, fmt):
    from PIL import EpsImagePlugin, Image

    path = tmp_path / "photo.jpg"
    if fmt == "EPS":
        path.write_bytes(b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 8 8\nshowpage\n")
    else:
        Image.new("RGB", (16, 16), (1, 2, 3)).save(path, format=fmt)
    # Ghostscript must never start: a crafted EPS is a PostScript program
    monkeypatch.setattr(EpsImagePlugin, "Ghostscript", lambda *a, **k: pytest.fail("Ghostscript ran"))
    with pytest.raises(UserError) as caught:
        decode(path)
    assert str(caught.value) == (
        f"{path} is not a readable image: by its content it is none of JPEG, PNG, WebP, BMP, GIF (the format is "
        "read from the bytes, not the name, so an EPS or TIFF renamed .jpg is refused); convert it to one of "
        "these, or remove or replace it, and rerun"
    )


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP", "BMP", "GIF"])
def test_every_allowed_format_decodes_whatever_its_name(tmp_path, fmt):
    from PIL import Image

    path = tmp_path / "named-wrongly.jpg"
    Image.new("RGB", (16, 16), (200, 100, 50)).save(path, format=fmt, **({"quality": 100} if fmt != "GIF" else {}))
    assert (decode(path).int() - torch.tensor([200, 100, 50]).view(3, 1, 1)).abs().max() <= 12  # GIF's palette


@pytest.mark.parametrize("size", [(8, 500_000), (500_000, 8), (21, 1)])
def test_an_extreme_aspect_ratio_is_refused_from_the_header_before_any_resize(tmp_path, monkeypatch, size):
    from helpers import png_claiming
    from torchvision.transforms import functional as TF

    from pipeline.data.images import MAX_ASPECT_RATIO, ImageShapeError

    path = tmp_path / "strip.png"
    path.write_bytes(png_claiming(*size))  # a stub body: decoding would fail, so the refusal is the header's
    monkeypatch.setattr(TF, "resize", lambda *a, **k: pytest.fail("resized"))
    width, height = size
    with pytest.raises(ImageShapeError) as caught:
        decode_image(path, 224, "crop", channels=3, max_pixels=10**7)
    assert str(caught.value) == (
        f"{path} is {width}x{height}, one side over {MAX_ASPECT_RATIO} times the other (the most resizing to a "
        "square accepts, pipeline.data.images.MAX_ASPECT_RATIO); crop it to a less extreme shape or remove it"
    )


def test_an_aspect_ratio_of_exactly_20_to_1_is_decoded(tmp_path):
    from PIL import Image

    path = tmp_path / "banner.png"
    Image.new("RGB", (200, 10), (9, 9, 9)).save(path)
    assert torch.equal(decode(path), pixels(9, 9, 9).expand(3, 8, 8))


def test_prepare_decodes_one_image_at_a_time_into_each_split_and_writes_the_same_bytes(tmp_path, monkeypatch):
    """Decoded images used to pile up in a list, then a stacked copy, then each split's copy: now each is copied
    into its split's tensor and dropped, so a folder of 100,000 images is not held several times over."""
    import weakref

    from PIL import Image

    from pipeline.core.files import file_sha256
    from pipeline.data import images as data

    rng = np.random.default_rng(0)
    for split, n in (("train", 4), ("test", 2)):
        for name in ("a", "b"):
            for i in range(n):
                (tmp_path / "in" / split / name).mkdir(parents=True, exist_ok=True)
                pixels_ = rng.integers(0, 256, (30 + i, 40, 3), dtype=np.uint8)
                Image.fromarray(pixels_).save(tmp_path / "in" / split / name / f"{i}.png")
    alive, most = [], [0]
    real = data.decode_image

    def counted(*args, **kwargs):
        image = real(*args, **kwargs)
        alive.append(weakref.ref(image))
        most[0] = max(most[0], sum(ref() is not None for ref in alive))
        return image

    monkeypatch.setattr(data, "decode_image", counted)
    views = paper_views((16, 3), (24, 3))
    result = data.prepare_image_folder(tmp_path / "in", tmp_path / "out", views, 10**6, 1)
    assert most[0] == 1  # never two decoded images alive at once
    assert result["counts"] == {"train": 6, "val": 2, "test": 4}
    # the bytes the old code wrote: every image decoded, stacked, then split by index
    monkeypatch.setattr(data, "decode_image", real)
    for view, (size, channels, mode, mean, std) in views.items():
        for split, rows in itertools.groupby(result["manifest"], key=lambda row: row[0]):
            sources = [tmp_path / "in" / row[1] for row in rows]
            images = torch.stack([real(p, size, mode, channels, 10**6) for p in sources])
            labels = torch.tensor([result["classes"].index(p.parent.name) for p in sources])
            expected = tmp_path / f"{view}-{split}.pt"
            ImageSet(images, labels, result["classes"], tuple(mean), tuple(std)).save(expected)
            assert file_sha256(data.split_file(tmp_path / "out", view, split)) == file_sha256(expected)


def test_an_augmenting_preparer_normalises_only_when_scoring_and_augments_when_training():
    image_set = grey_set(8, seed=0)
    expected = image_set.normalise(image_set.images)
    augmenting = batch_preparer(image_set, augment_train=True)
    generator = torch.Generator().manual_seed(1)
    state = generator.get_state()
    assert torch.equal(augmenting(image_set.images, False, None), expected)  # what evaluate passes
    assert torch.equal(augmenting(image_set.images, False, generator), expected)
    assert torch.equal(generator.get_state(), state)  # scoring draws nothing from the training generator
    assert not torch.equal(augmenting(image_set.images, True, generator), expected)
    plain = batch_preparer(image_set, augment_train=False)
    assert torch.equal(plain(image_set.images, True, torch.Generator().manual_seed(1)), expected)


FASHION_MNIST_TRAIN_IMAGES = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")


def test_fashion_mnist_constants_are_the_training_images_mean_and_std():
    assert data.FASHION_MNIST_MEAN == (0.2860,)
    assert data.FASHION_MNIST_STD == (0.3530,)
    if not FASHION_MNIST_TRAIN_IMAGES.is_file():
        pytest.skip(f"{FASHION_MNIST_TRAIN_IMAGES} is absent (sudo apt-get install dataset-fashion-mnist)")
    images = read_idx(FASHION_MNIST_TRAIN_IMAGES)
    assert images.shape == (60_000, 28, 28)
    # exact statistics of every pixel from its histogram (no 47M-element float copy)
    counts = np.bincount(images.ravel(), minlength=256).astype(np.float64)
    values = np.arange(256) / 255
    mean = (counts * values).sum() / counts.sum()
    std = np.sqrt((counts * (values - mean) ** 2).sum() / counts.sum())
    assert (round(mean, 4), round(std, 4)) == (data.FASHION_MNIST_MEAN[0], data.FASHION_MNIST_STD[0])


def torchvision_vit_transform():
    from torchvision.models import ViT_B_16_Weights

    return ViT_B_16_Weights.IMAGENET1K_V1.transforms()  # builds the transform only; downloads nothing


def test_imagenet_constants_and_crop_ratio_are_torchvisions():
    transform = torchvision_vit_transform()
    assert tuple(transform.mean) == data.IMAGENET_MEAN
    assert tuple(transform.std) == data.IMAGENET_STD
    assert transform.resize_size[0] / transform.crop_size[0] == data.RESIZE_RATIO


def test_the_pretrained_view_carries_torchvisions_imagenet_constants(tmp_path):
    from PIL import Image

    transform = torchvision_vit_transform()
    mean, std = tuple(transform.mean), tuple(transform.std)
    views = paper_views(scratch=(8, 3), pretrained=(16, 3))
    assert views["pretrained"] == (16, 3, "crop", mean, std)
    assert views["scratch"] == (8, 3, "resize", (0.0, 0.0, 0.0), (1.0, 1.0, 1.0))
    # and every set prepared for the pretrained view is saved with them
    for folder, count in (("train", 3), ("test", 2)):
        for name, colour in (("cat", (200, 10, 10)), ("dog", (10, 10, 200))):
            (tmp_path / "images" / folder / name).mkdir(parents=True)
            for i in range(count):
                Image.new("RGB", (20, 20), colour).save(tmp_path / "images" / folder / name / f"{i}.png")
    prepare_image_folder(tmp_path / "images", tmp_path / "out", views, max_pixels=10**6, val_per_class=1)
    saved = {p.name: ImageSet.load(p) for p in (tmp_path / "out" / "pretrained").glob("*.pt")}
    assert {"train.pt", "test.pt"} <= set(saved)
    for name, image_set in saved.items():
        assert (image_set.mean, image_set.std) == (mean, std), name


@pytest.mark.parametrize(("image_size", "channels"), [(28, 1), (16, 3)])
def test_every_offline_prepared_set_carries_the_fashion_mnist_constants(tmp_path, image_size, channels):
    rng = np.random.default_rng(0)
    raw = tmp_path / "raw"
    raw.mkdir()
    for prefix, n in (("train", 40), ("t10k", 20)):  # every class 4 (train) or 2 (test) times
        (raw / f"{prefix}-images-idx3-ubyte").write_bytes(idx_bytes(rng.integers(0, 256, (n, 28, 28))))
        (raw / f"{prefix}-labels-idx1-ubyte").write_bytes(idx_bytes(np.arange(n) % 10))
    out = tmp_path / "out"
    # the fourth argument is how many images per class a split takes (validation, or few-shot training)
    prepare_offline(raw, out, ["Trouser", "Bag"], 1, image_size=image_size, channels=channels)
    saved = {p.relative_to(out).as_posix(): ImageSet.load(p) for p in out.rglob("*.pt")}
    assert {f"{split}.pt" for split in data.SINGLE_VIEW} | {f"{view}/test.pt" for view in paths.VIEWS} <= set(saved)
    for name, image_set in saved.items():
        assert (image_set.mean, image_set.std) == ((0.2860,) * channels, (0.3530,) * channels), name
        assert image_set.images.shape[1:] == (channels, image_size, image_size), name


def test_each_seed_draws_its_own_subsets_nested_across_sizes_and_balanced():
    labels = torch.randint(0, 3, (300,), generator=torch.Generator().manual_seed(0))
    for seed in (0, 1):
        previous = set()
        for n in (1, 5, 20, 60):
            index = data.nested_indices(labels, n, seed)
            assert torch.equal(index, data.nested_indices(labels, n, seed))  # same seed, same subset
            assert torch.equal(index, index.sort().values) and len(set(index.tolist())) == len(index)
            assert Counter(labels[index].tolist()) == {0: n, 1: n, 2: n}
            assert previous <= set(index.tolist())  # within a seed, every smaller set is inside the larger one
            previous = set(index.tolist())
    assert not torch.equal(data.nested_indices(labels, 20, 1), data.nested_indices(labels, 20, 0))


def test_a_class_with_fewer_images_contributes_all_it_has():
    labels = torch.tensor([0] * 10 + [1] * 3)
    assert Counter(labels[data.nested_indices(labels, 5, 0)].tolist()) == {0: 5, 1: 3}
    assert torch.equal(data.nested_indices(labels, None, 0), torch.arange(13))  # None: every image


def test_the_validation_split_is_disjoint_fixed_and_never_drawn_for_training():
    labels = torch.arange(3).repeat_interleave(10)
    train, val = data.split_validation(labels, 4)
    assert Counter(labels[val].tolist()) == {0: 4, 1: 4, 2: 4}
    assert sorted(train.tolist() + val.tolist()) == list(range(30))
    assert torch.equal(val, data.split_validation(labels, 4)[1])  # fixed: never a run seed's choice
    with pytest.raises(UserError, match="validation takes 10 images per class but a class has only 10"):
        data.split_validation(labels, 10)


def test_the_pixel_cap_is_a_param(tmp_path):
    from pipeline.data.images import ImageTooLargeError, decode_image

    path = tmp_path / "small.png"
    path.write_bytes(png_claiming(40, 30))
    with pytest.raises(ImageTooLargeError, match=r"40x30 = 1,200 pixels, over the cap of 1,000"):
        decode_image(path, 32, "resize", 1, max_pixels=1000)


@pytest.mark.parametrize("data", [b"not an image\n", b"", None], ids=["text", "empty", "truncated-jpeg"])
def test_non_image_in_a_class_folder_is_a_user_error_naming_the_file(tmp_path, data):
    from pipeline.data.images import decode_image

    path = tmp_path / "train" / "beta" / "notes.jpg"
    path.parent.mkdir(parents=True)
    path.write_bytes(truncated_jpeg() if data is None else data)
    with pytest.raises(UserError, match=re.escape(str(path)) + r" is not a readable image"):
        decode_image(path, 32, "resize", 3, max_pixels=10**6)
