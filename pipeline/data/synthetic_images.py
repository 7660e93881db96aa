"""Issue 38's synthetic image set on disk: every instance of every category rendered once
(:mod:`pipeline.data.fractals`), and the nested sizes of the study read from it.

One uint8 array (categories, instances, 28, 28) in ``data/synthetic/images.npy``, instance j of category c at
[c, j] whatever size reads it: a size of n instances per category is ``[:, :n]``, the held-out split the
instances after the largest size's. The array is written in blocks of categories into a memory-mapped file, so
memory stays at one block's whatever the set's size; its pixel mean and standard deviation (the synthetic
images' own normalisation) are summed block by block and kept in ``info.json``."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from pipeline.core import paths
from pipeline.core.errors import UserError
from pipeline.core.files import atomic_dir, write_json
from pipeline.data import presets
from pipeline.data.fractals import FractalSpec, categories, filling_rate, render_categories
from pipeline.data.images import ImageSet

IMAGES, INFO = "images.npy", "info.json"
BLOCK_IMAGES = 2_000  # images per chaos game, at least one category: about 0.4 GB of transient arrays at 56 px


@dataclass(frozen=True)
class SyntheticSet:
    """What the generator draws: ``categories`` systems from ``seed``, ``instances`` of each (the largest size's
    and the held-out ones together)."""

    seed: int
    categories: int
    instances: int

    def spec(self) -> FractalSpec:
        return FractalSpec(seed=self.seed, categories=self.categories, per_category=self.instances)


def generate(wanted: SyntheticSet, folder: Path = paths.SYNTHETIC) -> dict:
    """Renders every instance of ``wanted`` into ``folder`` (replaced whole, or left as it was if this fails);
    returns ``info.json``'s content: the set, its pixel mean and standard deviation in [0, 1], the filling rates'
    mean and range, and the seconds and images/s it took."""
    spec = wanted.spec()
    start = time.perf_counter()
    params, active = categories(spec)
    per_block = max(1, BLOCK_IMAGES // wanted.instances)
    shape = (wanted.categories, wanted.instances, spec.size, spec.size)
    total, total_sq, fills = 0.0, 0.0, []
    with atomic_dir(folder) as tmp:
        images = np.lib.format.open_memmap(tmp / IMAGES, mode="w+", dtype=np.uint8, shape=shape)
        for first in range(0, wanted.categories, per_block):
            chosen = range(first, min(first + per_block, wanted.categories))
            block = render_categories(spec, params, active, chosen)[:, 0]  # (len(chosen) x instances, H, W)
            images[chosen.start : chosen.stop] = block.reshape(len(chosen), wanted.instances, spec.size, spec.size)
            scaled = block.astype(np.float64) / 255
            total, total_sq = total + scaled.sum(), total_sq + np.square(scaled).sum()
            fills.append(filling_rate(block))
        images.flush()
        del images
        seconds = time.perf_counter() - start
        count = wanted.categories * wanted.instances * spec.size**2
        mean = total / count
        fill = np.concatenate(fills)
        info = {
            "seed": wanted.seed, "categories": wanted.categories, "instances": wanted.instances,
            "images": wanted.categories * wanted.instances, "size": spec.size,
            "mean": mean, "std": float(np.sqrt(max(total_sq / count - mean**2, 0.0))),
            "fill": {"mean": float(fill.mean()), "min": float(fill.min()), "max": float(fill.max())},
            "seconds": round(seconds, 1), "images_per_s": round(wanted.categories * wanted.instances / seconds),
        }  # fmt: skip
        write_json(tmp / INFO, info)
    return info


def read_info(folder: Path = paths.SYNTHETIC) -> dict:
    path = folder / INFO
    if not path.is_file():
        raise UserError(f"{path} is missing; run `dvc repro studies/synthetic/dvc.yaml` (its synthetic_data stage "
                        "renders the images)")  # fmt: skip
    return json.loads(path.read_text())


def load_size(
    per_category: int, largest: int, held_out: int, folder: Path = paths.SYNTHETIC
) -> tuple[ImageSet, ImageSet]:
    """The first ``per_category`` instances of every category (a training size) and the ``held_out`` instances
    after the ``largest`` size's, as (N, 1, H, W) uint8 sets labelled by category."""
    info = read_info(folder)
    if info["instances"] != largest + held_out or per_category > largest:
        raise UserError(f"{folder / IMAGES} holds {info['instances']} instances per category, not the largest size's "
                        f"{largest} + {held_out} held out (or {per_category} is above the largest size); rerun its "
                        "synthetic_data stage")  # fmt: skip
    images = np.load(folder / IMAGES, mmap_mode="r")  # (C, I, H, W)
    names = [f"fractal_{c:04d}" for c in range(info["categories"])]

    def image_set(part: np.ndarray) -> ImageSet:
        count = part.shape[1]
        flat = torch.from_numpy(np.ascontiguousarray(part)).reshape(-1, 1, *part.shape[2:])  # (C x n, 1, H, W)
        labels = torch.arange(info["categories"]).repeat_interleave(count)
        return ImageSet(flat, labels, names, (info["mean"],), (info["std"],))

    return image_set(images[:, :per_category]), image_set(images[:, largest : largest + held_out])


def examples(rows: int, columns: int, folder: Path = paths.SYNTHETIC) -> np.ndarray:
    """The first ``columns`` instances of the first ``rows`` categories: (rows, columns, H, W) uint8."""
    return np.array(np.load(folder / IMAGES, mmap_mode="r")[:rows, :columns])


def require_offline(preset: str) -> None:
    """The study scores its backbones on the offline preset's target classes (and compares Fashion-MNIST's pool)."""
    if not presets.get(preset).has_pool:
        raise UserError(f"the synthetic study runs on the offline preset's target classes, not {preset!r}'s; set "
                        "preset: offline")  # fmt: skip
