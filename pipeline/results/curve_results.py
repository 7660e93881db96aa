"""The data-hunger curve's point files gathered: one table per arm and size, its baselines, its CSV series."""

from __future__ import annotations

from pipeline.core.arm_registry import ARMS
from pipeline.core.config import DataHungerConfig
from pipeline.core.errors import UserError
from pipeline.core.files import read_json
from pipeline.data.images import ImageSet
from pipeline.data.subsets import point_path, seed_subset
from pipeline.results.metrics import baselines as baselines_of


def read_points(points: list[int], arms=ARMS) -> dict[str, list[dict]]:
    """Every point's summary, per arm, in size order."""
    summaries = {}
    for arm in arms:
        summaries[arm] = []
        for point in points:
            path = point_path(arm, point)
            if not path.is_file():
                raise UserError(f"{path} is missing; run `dvc repro` (the sweep stages make it)")
            summaries[arm].append(read_json(path))
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


def stopped_at_floor(run: dict, window: int) -> bool:
    """Whether a plateau-schedule run's cooldown began at the first score the rule allows (two windows of
    ``window`` scores, step 0's included): the run then ended as early as it could, so the floor, not its own
    validation curve, may have decided its length (as the cap may at the other end). False for a run without a
    plateau cooldown."""
    scored = [record["step"] for record in run.get("curve", []) if record.get("val_loss") is not None]
    decay = run.get("decay_step")
    return decay is not None and len(scored) >= 2 * window and decay == scored[2 * window - 1]


def aggregate(summaries: dict[str, list[dict]], baseline: dict[str, dict], window: int | None = None) -> dict:
    """``{arm: {n: {mean, std, per_seed}}}`` of test accuracy, with the baselines and the run settings; with
    ``window`` (the plateau rule's, ``data_hunger.plateau_window``), each trained arm's ``stopped_at_floor``
    beside its ``stopped_at_cap``."""
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
    if window is not None:
        for arm, points in summaries.items():
            for point in points:
                if "stopped_at_cap" in point:
                    result["runs"][arm][str(point["n_train_per_class"])]["stopped_at_floor"] = sum(
                        stopped_at_floor(run, window) for run in point["runs"].values()
                    )
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
