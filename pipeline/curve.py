"""The data-hunger curve: its sizes, the nested subsets it draws, its point files and their aggregation.

Sizes: a point is an index into ``data_hunger.offline_sizes`` (images per class) or, for the paper
preset, ``data_hunger.paper_fractions`` (times the largest class's count, each class clipped to what
it has). Subsets are nested: each class's images are put in one fixed random order (seed
``SUBSET_SEED``, never chosen by test score) and a size takes the first ``n`` of each class.
"""

from __future__ import annotations

import itertools
import json

import torch

from pipeline import paths
from pipeline.arms import ARMS
from pipeline.config import DataHungerConfig
from pipeline.data import ImageSet, load_split, nested_indices
from pipeline.errors import UserError
from pipeline.metrics import baselines as baselines_of

TRAIN_ALL = paths.PREPARED / "train_all.pt"  # offline: every target-class training image (prepare stage)
OUTPUT = paths.METRICS / "data_hunger"


def point_path(arm: str, point: int):
    return OUTPUT / f"{arm}_{point}.json"


def sweep_train_set(preset: str, view: str) -> ImageSet:
    """The training images the sweep draws from: offline, all 6000 per class; paper, the train split."""
    return load_split(TRAIN_ALL if preset == "offline" else paths.prepared_split(view, "train"))


def sweep_sizes(cfg: DataHungerConfig, preset: str, labels: torch.Tensor, num_classes: int) -> list[int]:
    """Images per class at each point, checked against what each class has.

    Raises:
        UserError: an offline size exceeds a class's count, or two paper fractions round to one size.
    """
    counts = torch.bincount(labels, minlength=num_classes).tolist()
    if preset == "offline":
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


def parameter_count(n: int) -> str:
    return f"{n / 1e6:.2g}M" if n >= 100_000 else f"{n:,}"


def read_points(points: list[int], arms=ARMS) -> dict[str, list[dict]]:
    """Every point's summary, per arm, in size order."""
    summaries = {}
    for arm in arms:
        summaries[arm] = []
        for point in points:
            path = point_path(arm, point)
            if not path.is_file():
                raise UserError(f"{path} is missing; run `dvc repro` (the sweep stages make it)")
            summaries[arm].append(json.loads(path.read_text()))
    return summaries


def baselines(train_all: ImageSet, test_set: ImageSet, sizes: list[int], logreg_max: int) -> dict[str, dict]:
    """Chance, majority and (up to ``logreg_max`` per class) raw-pixel logistic regression at each size,
    on the sweep's nested subsets. Larger sizes leave ``pixels_logreg`` out: sklearn's lbfgs takes minutes."""
    result = {}
    for n in sizes:
        index = nested_indices(train_all.labels, n)
        images, labels = train_all.images[index], train_all.labels[index]
        result[str(n)] = baselines_of(
            images, labels, test_set.images, test_set.labels, len(test_set.classes), with_pixels=n <= logreg_max
        )
    return result


def curve_csv(metrics: dict, arms) -> str:
    """The curve as a data series for `dvc plots` (``plots/data_hunger.csv``): one row per arm and size, with
    the mean and std over seeds; the pixel probe is the arm ``pixels_logreg`` (its one fit per size)."""
    rows = ["arm,n_train_per_class,test_acc,test_acc_std"]
    for arm in arms:
        rows += [
            f"{arm},{n},{v['mean']:.6g},{v['std']:.6g}"
            for n, v in sorted(metrics[arm].items(), key=lambda i: int(i[0]))
        ]
    for n, base in sorted(metrics["baselines"].items(), key=lambda i: int(i[0])):
        if "pixels_logreg" in base:
            rows.append(f"pixels_logreg,{n},{base['pixels_logreg']:.6g},0")
    return "\n".join(rows) + "\n"


def aggregate(summaries: dict[str, list[dict]], baseline: dict[str, dict]) -> dict:
    """``{arm: {n: {mean, std, per_seed}}}`` of test accuracy, with the baselines and the run settings."""
    result: dict = {
        arm: {str(s["n_train_per_class"]): s["test_acc"] for s in points} for arm, points in summaries.items()
    }
    first = next(iter(summaries.values()))[0]
    result["baselines"] = baseline
    result["trained_parameters"] = {arm: points[0]["trained_parameters"] for arm, points in summaries.items()}
    result["n_test"] = first["n_test"]
    result["steps"] = first["steps"]
    result["batch_size"] = first["batch_size"]
    return result
