"""The data-hunger curve: its sizes, the subsets it draws, its point files and their aggregation.

Sizes: a point is an index into ``data_hunger.offline_sizes`` (images per class) or, for the paper
preset, ``data_hunger.paper_fractions`` (times the largest class's count, each class clipped to what
it has). Every run seed draws its own subsets, nested across sizes: each class's training images are put
in a random order drawn from the seed (``data.nested_indices``) and a size takes the first ``n`` of each
class. Seed 000's arms (train_scratch, linear_probe) draw the same way, so a seed's 75 per class are the
same images in the headline and on the curve. The validation split is never among them.
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
# The params.yaml keys of sizes that must not exceed what the data holds (require_per_class), with what each
# draws from. SEED_ARMS_KEY: where Params.seed_arms_per_class comes from (paper preset: None, every image).
SEED_ARMS_KEY, SHOTS_KEY = "offline.train_per_class", "pretraining_scale.shots"
POOL_KEY = "pretraining_scale.pool_per_class"
_DRAWN_FROM = {
    SEED_ARMS_KEY: "left once validation.offline_per_class are held out",
    SHOTS_KEY: "left once validation.offline_per_class are held out",
    POOL_KEY: "in the pretraining pool",
}


def point_path(arm: str, point: int):
    return OUTPUT / f"{arm}_{point}.json"


def sweep_train_set(preset: str, view: str) -> ImageSet:
    """The training images every arm draws from: offline, the target classes' 5,900 per class left after
    validation; paper, the train folder less its validation images."""
    return load_split(TRAIN_ALL if preset == "offline" else paths.prepared_split(view, "train"))


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


def baselines(
    pool: ImageSet, test_set: ImageSet, sizes: list[int], logreg_max: int, seeds: list[int]
) -> dict[str, dict]:
    """Chance, majority and (up to ``logreg_max`` per class) a raw-pixel logistic regression at each size,
    each the mean over the seeds' subsets. Larger sizes leave ``pixels_logreg`` out: sklearn's lbfgs takes
    minutes. The like-for-like pixel baseline is the arm ``pixels`` (the few-shot probe on pixels)."""
    result = {}
    for n in sizes:
        runs = [
            baselines_of(
                part.images,
                part.labels,
                test_set.images,
                test_set.labels,
                len(test_set.classes),
                with_pixels=n is None or n <= logreg_max,
            )  # fmt: skip
            for part in (seed_subset(pool, n, seed) for seed in seeds)
        ]
        result[str(n)] = {key: sum(run[key] for run in runs) / len(runs) for key in runs[0]}
    return result


def curve_csv(metrics: dict, arms) -> str:
    """The curve as a data series for `dvc plots` (``plots/data_hunger.csv``): one row per arm and size, with
    the mean and std over seeds; the logistic regression on pixels is the series ``pixels_logreg``."""
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


VALIDATION_FIELDS = ["arm", "n_train_per_class", "seed", "lr", "step", "train_loss", "val_loss", "val_acc"]


def validation_csv(summaries: dict[str, list[dict]]) -> str:
    """Every trained run's validation curve at its chosen learning rate (``plots/validation.csv``)."""
    rows = [",".join(VALIDATION_FIELDS)]
    for arm, points in summaries.items():
        for point in points:
            for seed, run in point.get("runs", {}).items():
                for record in run.get("curve", []):
                    values = [arm, point["n_train_per_class"], seed, run["lr"], record["step"]]
                    # step 0's score has no training loss: an empty cell
                    values += ["" if record[k] is None else f"{record[k]:.6g}" for k in ("train_loss", "val_loss",
                                                                                         "val_acc")]  # fmt: skip
                    rows.append(",".join(str(v) for v in values))
    return "\n".join(rows) + "\n"


def aggregate(summaries: dict[str, list[dict]], baseline: dict[str, dict]) -> dict:
    """``{arm: {n: {mean, std, per_seed}}}`` of test accuracy, with the baselines and the run settings."""
    result: dict = {
        arm: {str(s["n_train_per_class"]): s["test_acc"] for s in points} for arm, points in summaries.items()
    }
    first = next(iter(summaries.values()))[0]
    result["baselines"] = baseline
    result["trained_parameters"] = {arm: points[0]["trained_parameters"] for arm, points in summaries.items()}
    # what each arm's runs did at each size: the kept weights' train loss, the step the best validation score
    # was reached, the budget, and the chosen learning rate (trained arms) or ridge (probes) with edge flags
    result["runs"] = {
        arm: {str(s["n_train_per_class"]): {k: s[k] for k in RUN_SUMMARY if k in s} for s in points}
        for arm, points in summaries.items()
    }
    result["n_test"] = first["n_test"]
    result["n_val"] = first["n_val"]
    return result


RUN_SUMMARY = (
    "train_loss",
    "val_loss",
    "val_acc",
    "best_step",
    "steps",
    "budget",
    "lr",
    "lr_at_edge",
    "reg",
    "reg_at_edge",
    "stopped_at_cap",
)


def protocol_arms(curve: dict, cfg: DataHungerConfig) -> dict:
    """Every arm of the curve at ``cfg.headline_point``: ``{n_train_per_class, <arm>: {mean, std, per_seed}}``."""
    sizes = sorted((int(n) for n in curve[ARMS[0]]), key=int)
    n = str(sizes[cfg.headline_point])
    return {"n_train_per_class": int(n), **{arm: curve[arm][n] for arm in ARMS}}
