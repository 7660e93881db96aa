"""Seed statistics on plain numbers, without torch: spreads over seeds, paired differences with their t
intervals, the comparisons the README states, and metrics flattened for MLflow. The stages that only gather
JSON (data_hunger, pretraining_scale, summary) read them without importing the model or the engine."""

from __future__ import annotations

import math
import statistics


def numeric_leaves(tree: dict, prefix: str = "") -> dict[str, float]:
    """Every number in a metrics mapping under its dotted path (``scratch.test_acc.mean``), for MLflow;
    lists (per-seed values) are left out, their mean and std are leaves already."""
    leaves: dict[str, float] = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            leaves.update(numeric_leaves(value, f"{path}."))
        elif isinstance(value, int | float) and not isinstance(value, bool):
            leaves[path] = float(value)
    return leaves


def spread(values: list[float]) -> dict:
    """Mean, sample standard deviation (0 for one seed) and the per-seed values."""
    return {
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
        "per_seed": list(values),
    }


# The comparisons the README states, each paired by seed (a seed's arms see the same training images):
# every transfer or convolutional arm against the ViT from scratch, and every arm against the pixel probe.
COMPARISONS = (
    ("linear", "scratch"),
    ("finetune", "scratch"),
    ("cnn", "scratch"),
    ("finetune", "linear"),
    ("scratch", "pixels"),
    ("cnn", "pixels"),
    ("linear", "pixels"),
    ("finetune", "pixels"),
)


def paired_difference(a: list[float], b: list[float], confidence: float = 0.95) -> dict:
    """``a - b`` paired by seed: the mean difference, its two-sided ``confidence`` t interval over the seeds
    (n - 1 degrees of freedom) and a verdict: ``ahead`` or ``behind`` where the interval excludes 0, else
    ``level``. One seed gives no interval (``level``, bounds equal to the difference)."""
    from scipy import stats

    if len(a) != len(b) or not a:
        raise ValueError(f"a paired difference needs the same seeds on both sides, got {len(a)} and {len(b)}")
    differences = [x - y for x, y in zip(a, b, strict=True)]
    mean = statistics.fmean(differences)
    if len(differences) == 1:
        low = high = mean
    else:
        half = float(stats.t.ppf(0.5 + confidence / 2, len(differences) - 1)) * statistics.stdev(differences)
        half /= math.sqrt(len(differences))
        low, high = mean - half, mean + half
    verdict = "ahead" if low > 0 else "behind" if high < 0 else "level"
    return {"mean": mean, "low": low, "high": high, "n": len(differences), "verdict": verdict,
            "per_seed": differences}  # fmt: skip


def curve_comparisons(curve: dict[str, dict[str, dict]], pairs=COMPARISONS) -> dict[str, dict[str, dict]]:
    """``{"a-b": {n: paired_difference}}`` at every size both arms ran, from the per-seed test accuracies of
    ``{arm: {n: {per_seed}}}``."""
    result: dict[str, dict[str, dict]] = {}
    for a, b in pairs:
        if a not in curve or b not in curve:
            continue
        sizes = sorted(set(curve[a]) & set(curve[b]), key=int)
        result[f"{a}-{b}"] = {n: paired_difference(curve[a][n]["per_seed"], curve[b][n]["per_seed"]) for n in sizes}
    return result


def paired_p_value(differences: list[float]) -> float:
    """The two-sided p-value of a paired t test that the mean of ``differences`` is 0 (n - 1 degrees of
    freedom): the test whose 95% interval :func:`paired_difference` reports. 1.0 for fewer than two seeds, or
    when every seed's difference is 0; 0.0 when they are equal and not 0 (no spread)."""
    from scipy import stats

    if len(differences) < 2:
        return 1.0
    mean, sd = statistics.fmean(differences), statistics.stdev(differences)
    if sd == 0:
        return 1.0 if mean == 0 else 0.0
    t = mean / (sd / math.sqrt(len(differences)))
    return float(2 * stats.t.sf(abs(t), len(differences) - 1))


def holm_verdicts(comparisons: dict[str, dict[str, dict]], alpha: float = 0.05) -> dict[str, dict[str, str]]:
    """Holm's step-down over every comparison at every size at once (family-wise error ``alpha``): the p-values
    sorted ascending, the k-th (from 0) rejected while it is at most ``alpha / (m - k)``, and none after the
    first that is not. A rejected comparison keeps its direction (``ahead`` or ``behind``); the rest read
    ``level``. ``{"a-b": {n: verdict}}`` in the shape of :func:`curve_comparisons`."""
    cells = [(paired_p_value(value["per_seed"]), pair, n, value) for pair, by_size in comparisons.items()
             for n, value in by_size.items()]  # fmt: skip
    ordered = sorted(cells, key=lambda cell: cell[0])  # stable: ties keep the comparisons' order
    verdicts = {pair: dict.fromkeys(by_size, "level") for pair, by_size in comparisons.items()}
    for k, (p, pair, n, value) in enumerate(ordered):
        if p > alpha / (len(ordered) - k):
            break
        verdicts[pair][n] = "ahead" if value["mean"] > 0 else "behind"
    return verdicts


def with_holm(
    comparisons: dict[str, dict[str, dict]], alpha: float = 0.05, primary: dict[str, list[str]] | None = None
) -> dict[str, dict[str, dict]]:
    """``comparisons`` with each cell's paired t test p-value (``p``) and its verdict under Holm's step-down over
    all of them (``holm``): what five seeds support once the 40-odd comparisons are read together. ``primary``
    (``{"a-b": [sizes]}``, named before the run) marks its cells with Holm's verdict over that family alone
    (``holm_primary``)."""
    holm = holm_verdicts(comparisons, alpha)
    family = {pair: {n: comparisons[pair][n] for n in sizes} for pair, sizes in (primary or {}).items()}
    first = holm_verdicts(family, alpha) if family else {}
    return {
        pair: {
            n: value
            | {"p": paired_p_value(value["per_seed"]), "holm": holm[pair][n]}
            | ({"holm_primary": first[pair][n]} if n in first.get(pair, {}) else {})
            for n, value in by_size.items()
        }
        for pair, by_size in comparisons.items()
    }
