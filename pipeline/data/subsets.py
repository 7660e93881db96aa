"""The data-hunger curve's sizes, the subsets it draws and where its point files live (pipeline.results.curve_results
gathers them).

Sizes: a point is an index into ``data_hunger.offline_sizes`` (images per class) or, for the paper
preset, ``data_hunger.paper_fractions`` (times the largest class's count, each class clipped to what
it has). Every run seed draws its own subsets, nested across sizes: each class's training images are put
in a random order drawn from the seed (``data.nested_indices``) and a size takes the first ``n`` of each
class. Seed 000's arms (train_scratch, linear_probe) draw the same way, so a seed's 75 per class are the
same images in the headline and on the curve. The validation split is never among them.
"""

from __future__ import annotations

import itertools

import torch

from pipeline.core import paths
from pipeline.core.config import DataHungerConfig
from pipeline.core.errors import UserError
from pipeline.data import presets
from pipeline.data.images import ImageSet, load_split, nested_indices

OUTPUT = paths.METRICS / "data_hunger"
# The params.yaml keys of sizes that must not exceed what the data holds (require_per_class), with what each
# draws from. SEED_ARMS_KEY: where Params.seed_arms_per_class comes from (paper preset: None, every image).
SEED_ARMS_KEY, SHOTS_KEY = "offline.train_per_class", "pretraining_scale.shots"
POOL_KEY = "pretraining_scale.pool_per_class"
MONITOR_KEY = "data_hunger.monitor_per_class"
_DRAWN_FROM = {
    MONITOR_KEY: "in the validation split (validation.offline_per_class or paper_per_class)",
    SEED_ARMS_KEY: "left once validation.offline_per_class are held out",
    SHOTS_KEY: "left once validation.offline_per_class are held out",
    POOL_KEY: "in the pretraining pool",
}


def point_path(arm: str, point: int):
    return OUTPUT / f"{arm}_{point}.json"


def sweep_train_set(preset: str, view: str) -> ImageSet:
    """The training images every arm draws from: offline, the target classes' 6,000 training images per class less
    validation's (5,500 left at ``validation.offline_per_class: 500``); paper, the train folder less its validation
    images."""
    return load_split(presets.get(preset).training_file(view))


def val_set(view: str) -> ImageSet:
    return load_split(paths.prepared_split(view, "val"))


def seed_subset(pool: ImageSet, per_class: int | None, seed: int, key: str | None = None) -> ImageSet:
    """One seed's ``per_class`` images of each class from ``pool`` (None: all of it).

    Args:
        key: the params.yaml key ``per_class`` comes from; given, a class with fewer images is refused
            (:func:`require_per_class`) instead of giving all it has.
    """
    if key is not None:
        require_per_class(pool, per_class, key)
    return pool.subset(nested_indices(pool.labels, per_class, seed))


def require_per_class(pool: ImageSet, per_class: int | None, key: str) -> None:
    """Refuses a size ``pool`` cannot give: a smaller class would be clipped silently.

    Raises:
        UserError: a class of ``pool`` has fewer than ``per_class`` images; names ``key``, the class and its count.
    """
    if per_class is None:
        return
    counts = torch.bincount(pool.labels, minlength=len(pool.classes)).tolist()
    smallest = min(range(len(counts)), key=counts.__getitem__)
    if counts[smallest] < per_class:
        raise UserError(
            f"params.yaml: {key} asks for {per_class} images per class but class {pool.classes[smallest]!r} has only "
            f"{counts[smallest]} {_DRAWN_FROM.get(key, 'to draw from')}; lower {key} to at most {counts[smallest]}"
        )


def sweep_sizes(cfg: DataHungerConfig, preset: str, labels: torch.Tensor, num_classes: int) -> list[int]:
    """Images per class at each point, checked against what each class has.

    Raises:
        UserError: an offline size exceeds a class's count, or two paper fractions round to one size.
    """
    counts = torch.bincount(labels, minlength=num_classes).tolist()
    if presets.get(preset).sizes_are_counts:
        sizes = list(cfg.offline_sizes)
        if sizes[-1] > min(counts):
            raise UserError(
                f"data_hunger.offline_sizes asks for {sizes[-1]} images per class but the smallest class has "
                f"{min(counts)}; lower the sizes in params.yaml"
            )
        return sizes
    sizes = [max(1, round(f * max(counts))) for f in cfg.paper_fractions]
    if any(a >= b for a, b in itertools.pairwise(sizes)):
        raise UserError(
            f"data_hunger.paper_fractions {cfg.paper_fractions} give {sizes} images per class (largest class "
            f"{max(counts)}); two points would be the same set. Space the fractions further apart"
        )
    return sizes
