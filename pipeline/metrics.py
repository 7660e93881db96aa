"""Per-image test metrics, baselines and seed statistics for the evaluate stage."""

from __future__ import annotations

import csv
import io
import math
import statistics

import numpy as np
import torch
from torch import nn

from pipeline.engine import Evaluation, count_parameters
from pipeline.files import tensor_bytes

# sklearn is imported inside the functions that use it: it takes 1.4 s, which every stage process
# (about 35 in a full `dvc repro`) would otherwise pay whether or not it fits a baseline.


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


def per_class(labels: torch.Tensor, predictions: torch.Tensor, classes: list[str]) -> dict:
    """Precision, recall and F1 of each class (0 where a class is never predicted)."""
    from sklearn.metrics import precision_recall_fscore_support

    precision, recall, f1, _ = precision_recall_fscore_support(
        labels.numpy(), predictions.numpy(), labels=list(range(len(classes))), zero_division=0
    )
    return {
        name: {"precision": float(p), "recall": float(r), "f1": float(f)}
        for name, p, r, f in zip(classes, precision, recall, f1, strict=True)
    }


def mean_per_class(reports: list[dict]) -> dict:
    """The seed mean of :func:`per_class` reports."""
    return {
        name: {k: statistics.fmean(report[name][k] for report in reports) for k in reports[0][name]}
        for name in reports[0]
    }


def collapse(predictions: torch.Tensor) -> float:
    """Share of predictions in the most frequent predicted class: 1.0 means one class for every image."""
    return torch.bincount(predictions).max().item() / len(predictions)


def confusion(labels: torch.Tensor, predictions: torch.Tensor, num_classes: int) -> list[list[int]]:
    from sklearn.metrics import confusion_matrix

    return confusion_matrix(labels.numpy(), predictions.numpy(), labels=list(range(num_classes))).tolist()


def majority_baseline(train_labels: torch.Tensor, test_labels: torch.Tensor) -> float:
    """Test accuracy of always predicting the most frequent training class (ties: lowest index)."""
    majority = torch.bincount(train_labels).argmax()
    return (test_labels == majority).float().mean().item()


def pixels_logreg(train_images: torch.Tensor, train_labels: torch.Tensor, test_images: torch.Tensor,
                  test_labels: torch.Tensor) -> float:  # fmt: skip
    """Test accuracy of a logistic regression on raw pixels scaled to [0, 1], fit on the same few-shot images."""
    from sklearn.linear_model import LogisticRegression

    def flat(images: torch.Tensor) -> np.ndarray:
        return images.reshape(len(images), -1).numpy().astype(np.float32) / 255

    classifier = LogisticRegression(max_iter=1000)
    classifier.fit(flat(train_images), train_labels.numpy())
    return float((classifier.predict(flat(test_images)) == test_labels.numpy()).mean())


def baselines(train_images: torch.Tensor, train_labels: torch.Tensor, test_images: torch.Tensor,
              test_labels: torch.Tensor, num_classes: int, with_pixels: bool = True) -> dict[str, float]:  # fmt: skip
    """What a model must beat: chance, the majority training class and (unless ``with_pixels`` is false,
    e.g. where sklearn's lbfgs would take minutes) a logistic regression on the same training images' pixels."""
    result = {"chance": 1 / num_classes, "majority": majority_baseline(train_labels, test_labels)}
    if with_pixels:
        result["pixels_logreg"] = pixels_logreg(train_images, train_labels, test_images, test_labels)
    return result


MB = 2**20


def summarise(results: dict[int, Evaluation], labels: torch.Tensor, classes: list[str], model: nn.Module,
              trainable: int) -> dict:  # fmt: skip
    evaluations = list(results.values())
    state = {k: v.cpu() for k, v in model.state_dict().items()}
    head = {k: v for k, v in state.items() if k.startswith("heads.")}
    return {
        "test_acc": spread([e.accuracy for e in evaluations]),
        "test_loss": spread([e.loss for e in evaluations]),
        "per_class": mean_per_class([per_class(labels, e.predictions, classes) for e in evaluations]),
        "collapse": sum(collapse(e.predictions) for e in evaluations) / len(evaluations),
        "file_size_mb": {"model": len(tensor_bytes(state)) / MB, "head": len(tensor_bytes(head)) / MB},
        "params": {"total": count_parameters(model), "trainable": trainable},
    }


def predictions_csv(labels: torch.Tensor, predictions: dict[int, torch.Tensor], classes: list[str]) -> str:
    """One row per test image and seed (``seed,actual,predicted``): DVC's confusion template counts rows, so
    its matrix sums the seeds, as plots/confusion.png does. Classes are written as ``<number> <name>`` (``1
    Pullover``), numbered from 1 in class order and zero-padded, because the template sorts them as text: so its
    axes keep the class order of plots/confusion.png."""
    width = len(str(len(classes)))
    names = [f"{i + 1:0{width}d} {name}" for i, name in enumerate(classes)]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["seed", "actual", "predicted"])
    for seed, predicted in predictions.items():
        writer.writerows((seed, names[int(a)], names[int(p)]) for a, p in zip(labels, predicted, strict=True))
    return buffer.getvalue()


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
