"""Per-image test metrics and baselines for the evaluate stage (seed statistics: :mod:`pipeline.results.stats`)."""

from __future__ import annotations

import csv
import io
import statistics

import numpy as np
import torch
from torch import nn

from pipeline.core.files import tensor_bytes
from pipeline.results.stats import spread

# sklearn is imported inside the functions that use it: it takes 1.4 s, which every stage process
# (about 35 in a full `dvc repro`) would otherwise pay whether or not it fits a baseline.


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


def summarise(results: dict, labels: torch.Tensor, classes: list[str], model: nn.Module, total: int,
              trainable: int) -> dict:  # fmt: skip
    """Each seed's ``engine.Evaluation`` (``results``) of ``model`` summed up for metrics/evaluate.json, with its
    ``total`` and ``trainable`` parameter counts."""
    evaluations = list(results.values())
    state = {k: v.cpu() for k, v in model.state_dict().items()}
    head = {k: v for k, v in state.items() if k.startswith("heads.")}
    return {
        "test_acc": spread([e.accuracy for e in evaluations]),
        "test_loss": spread([e.loss for e in evaluations]),
        "per_class": mean_per_class([per_class(labels, e.predictions, classes) for e in evaluations]),
        "collapse": sum(collapse(e.predictions) for e in evaluations) / len(evaluations),
        "file_size_mb": {"model": len(tensor_bytes(state)) / MB, "head": len(tensor_bytes(head)) / MB},
        "params": {"total": total, "trainable": trainable},
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
