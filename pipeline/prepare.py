"""Stage prepare: decode and resize every image once into uint8 tensor files, plus a manifest.

Offline preset: the target classes' few-shot train set and whole test set, every training image of
the target classes (``train_all``, for the data-hunger sweep), and the pretraining pool (every image
of the other classes). Paper preset: the ImageFolder train and test splits, once
per input transform (``scratch``: squashed to the model size; ``pretrained``: the weights' resize
and centre crop, normalised with ImageNet statistics).

Every file goes into a temporary folder that replaces ``data/prepared`` whole once all are written,
so an unreadable image found halfway (or a kill) leaves the previous prepared data untouched.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from pipeline import paths
from pipeline.config import FASHION_MNIST_CLASSES, Params, load_params
from pipeline.data import (
    FASHION_MNIST_MEAN,
    FASHION_MNIST_STD,
    IMAGENET_MEAN,
    IMAGENET_STD,
    ImageSet,
    decode_image,
    few_shot_indices,
    list_image_folder,
    manifest_rows,
    subset,
)
from pipeline.errors import stage_main
from pipeline.fetch import read_idx
from pipeline.files import atomic_dir, write_json, write_text
from pipeline.model import vit_config

SPLIT_SEED = 0  # which few-shot images are drawn; fixed, never chosen by looking at test scores
SINGLE_VIEW = ("pool_train", "pool_test", "train_all")  # saved once as data/prepared/<split>.pt, not per arm


def split_file(out: Path, view: str, split: str) -> Path:
    """Where ``paths.prepared_split(view, split)`` will be, inside the folder ``out`` being written."""
    return out / paths.prepared_split(view, split).relative_to(paths.PREPARED)


def fit_to_model(images: torch.Tensor, size: int, channels: int) -> torch.Tensor:
    """(N, 1, 28, 28) uint8 -> (N, channels, size, size) uint8, for models not built for 28x28 grey."""
    if images.shape[-1] != size:
        images = F.interpolate(images.float(), size=(size, size), mode="bilinear", align_corners=False)
        images = images.round().clamp(0, 255).to(torch.uint8)
    return images.expand(-1, channels, -1, -1).contiguous()


def prepare_offline(params: Params, out: Path) -> dict:
    raw = paths.RAW / "fashion-mnist"
    train_images, train_labels = read_idx(raw / "train-images-idx3-ubyte"), read_idx(raw / "train-labels-idx1-ubyte")
    test_images, test_labels = read_idx(raw / "t10k-images-idx3-ubyte"), read_idx(raw / "t10k-labels-idx1-ubyte")
    config = vit_config(params.offline.model)
    target = [FASHION_MNIST_CLASSES.index(name) for name in params.offline.classes]
    pool = [i for i in range(len(FASHION_MNIST_CLASSES)) if i not in target]
    target_names, pool_names = list(params.offline.classes), [FASHION_MNIST_CLASSES[i] for i in pool]

    few_shot = few_shot_indices(train_labels, target, params.offline.train_per_class, SPLIT_SEED)
    splits = {
        "train": (train_images, train_labels, few_shot, target, target_names, "train"),
        "test": (test_images, test_labels, np.flatnonzero(np.isin(test_labels, target)), target, target_names, "t10k"),
        "pool_train": (
            train_images,
            train_labels,
            np.flatnonzero(np.isin(train_labels, pool)),
            pool,
            pool_names,
            "train",
        ),
        "pool_test": (test_images, test_labels, np.flatnonzero(np.isin(test_labels, pool)), pool, pool_names, "t10k"),
        # Every training image of the target classes (18,000, 14 MB): the data-hunger sweep's nested subsets.
        "train_all": (
            train_images,
            train_labels,
            np.flatnonzero(np.isin(train_labels, target)),
            target,
            target_names,
            "train",
        ),
    }
    manifest, counts = [], {}
    for split, (images, labels, indices, class_ids, names, source) in splits.items():
        picked, new_labels = subset(images, labels, indices, class_ids)
        picked = fit_to_model(picked, config.image_size, config.in_channels)
        image_set = ImageSet(
            picked, new_labels, names, FASHION_MNIST_MEAN * config.in_channels, FASHION_MNIST_STD * config.in_channels
        )
        if split in SINGLE_VIEW:
            image_set.save(out / f"{split}.pt")
        else:
            for view in paths.ARMS:  # both arms see the same inputs: the backbone was pretrained on them
                image_set.save(split_file(out, view, split))
        sources = [f"{source}-images-idx3-ubyte#{i}" for i in indices]
        manifest += manifest_rows(split, picked, new_labels, names, sources)
        counts[split] = len(new_labels)
    return {"classes": target_names, "pool_classes": pool_names, "counts": counts, "manifest": manifest}


def prepare_paper(params: Params, out: Path) -> dict:
    root = paths.RAW / "images"
    classes, files = list_image_folder(root)
    max_pixels = params.images.max_pixels
    views = {
        "scratch": (vit_config(params.paper.model), "resize", (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)),
        "pretrained": (vit_config(params.paper.backbone_model), "crop", IMAGENET_MEAN, IMAGENET_STD),
    }
    manifest, counts = [], {}
    for view, (config, mode, mean, std) in views.items():
        for split, pairs in files.items():
            images = torch.stack(
                [decode_image(path, config.image_size, mode, config.in_channels, max_pixels) for path, _ in pairs]
            )
            labels = torch.tensor([label for _, label in pairs], dtype=torch.int64)
            channels = config.in_channels
            ImageSet(images, labels, classes, tuple(mean[:channels]), tuple(std[:channels])).save(
                split_file(out, view, split)
            )
            if view == "scratch":
                sources = [str(path.relative_to(root)) for path, _ in pairs]
                manifest += manifest_rows(split, images, labels, classes, sources)
                counts[split] = len(labels)
    return {"classes": classes, "pool_classes": [], "counts": counts, "manifest": manifest}


@stage_main
def main() -> None:
    params = load_params()
    with atomic_dir(paths.PREPARED) as out:
        result = prepare_offline(params, out) if params.preset == "offline" else prepare_paper(params, out)
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(["split", "source", "class", "sha256"])
        writer.writerows(result["manifest"])
        write_text(out / "manifest.csv", buffer.getvalue())
        info = {k: result[k] for k in ("classes", "pool_classes", "counts")}
        write_json(out / "info.json", {"preset": params.preset, **info})
    print(f"prepare: {params.preset}, classes {result['classes']}, images per split {result['counts']}")


if __name__ == "__main__":
    main()
