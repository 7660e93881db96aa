"""Guards a mutation check found missing: scoring never augments, and the normalisation constants are the
data's and torchvision's own."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import CPU
from torch import nn

from pipeline import data, paths
from pipeline.data import ImageSet, batch_preparer, paper_views, prepare_image_folder
from pipeline.engine import Recipe, evaluate, train
from pipeline.fashion_mnist import prepare_offline, read_idx

FASHION_MNIST_TRAIN_IMAGES = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")

# --- scoring never augments ---------------------------------------------------------------------------------


def grey_set(n: int, seed: int, size: int = 8) -> ImageSet:
    """``n`` random (non-constant) greyscale images with labels 0, 1, 2, 0, 1, ..."""
    images = torch.randint(0, 256, (n, 1, size, size), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))
    return ImageSet(images, torch.arange(n) % 3, ["a", "b", "c"], data.FASHION_MNIST_MEAN, data.FASHION_MNIST_STD)


def tiny_model(seed: int = 0, size: int = 8) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Flatten(), nn.Linear(size * size, 3))


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


def test_evaluate_through_an_augmenting_preparer_gives_the_plain_logits():
    image_set, model = grey_set(10, seed=0), tiny_model()
    augmenting = evaluate(model, image_set.images, image_set.labels, CPU, 4, batch_preparer(image_set, True))
    plain = evaluate(model, image_set.images, image_set.labels, CPU, 4, batch_preparer(image_set, False))
    assert torch.equal(augmenting.logits, plain.logits)
    assert (augmenting.loss, augmenting.accuracy) == (plain.loss, plain.accuracy)
    # the comparison can fail: the same model on augmented inputs gives other logits
    generator = torch.Generator().manual_seed(0)
    augmented = evaluate(model, image_set.images, image_set.labels, CPU, 4,
                         lambda images, _, __: batch_preparer(image_set, True)(images, True, generator))  # fmt: skip
    assert not torch.equal(augmented.logits, plain.logits)


def test_train_scores_its_evaluation_sets_without_augmentation():
    train_set, val_set = grey_set(12, seed=0), grey_set(9, seed=1)
    model = tiny_model()
    recipe = Recipe(lr=0.05, batch_size=4, steps=6, optimizer="adam", weight_decay=0.0, schedule="none",
                    warmup_fraction=0.0, grad_clip=0.0)  # fmt: skip
    plain = batch_preparer(val_set, augment_train=False)
    scored = []

    def check(record: dict) -> None:  # the model as it is at this record
        expected = evaluate(model, val_set.images, val_set.labels, CPU, 256, plain)
        scored.append(record)
        assert (record["val_loss"], record["val_acc"]) == (expected.loss, expected.accuracy)

    history = train(
        model, train_set.images, train_set.labels, recipe, CPU, torch.Generator().manual_seed(0),
        prepare=batch_preparer(train_set, augment_train=True), record_every=2,
        evaluations={"val": (val_set.images, val_set.labels)}, eval_batch_size=256, on_record=check,
    )  # fmt: skip
    assert [r["step"] for r in scored] == [2, 4, 6] and scored == history
    final = evaluate(model, val_set.images, val_set.labels, CPU, 256, plain)
    assert history[-1]["val_loss"] == final.loss
    generator = torch.Generator().manual_seed(0)
    augmented = evaluate(model, val_set.images, val_set.labels, CPU, 256,
                         lambda images, _, __: batch_preparer(val_set, True)(images, True, generator))  # fmt: skip
    assert augmented.loss != final.loss  # so the equality above is not true of any scoring


# --- normalisation constants --------------------------------------------------------------------------------


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


def idx_bytes(array: np.ndarray) -> bytes:
    magic = {1: 0x00000801, 3: 0x00000803}[array.ndim]
    dims = b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    return magic.to_bytes(4, "big") + dims + array.astype(np.uint8).tobytes()


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
