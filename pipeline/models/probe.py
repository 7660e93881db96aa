"""The paper's few-shot linear probe (section 4.1, "Metrics"), in closed form.

"Few-shot accuracies are obtained by solving a regularized least-squares regression problem that maps the
(frozen) representation of a subset of training images to {-1, 1}^K target vectors. This formulation allows
us to recover the exact solution in closed form." With centred features X (n, D) and targets Y (n, K):

    W = (X^T X + lambda * s * I)^-1 X^T Y,    b = mean(Y) - mean(X) W,

where s = trace(X^T X) / D, the mean eigenvalue, makes the ridge grid (``data_hunger.probe_regs``) mean the
same for 128 features and for 784 pixels. Where D is too large for a D x D matrix (the paper preset's pixels:
150,528), the same solution comes from the n x n dual, W = X^T (X X^T + lambda * s * I)^-1 Y. The bias is
not regularised. lambda is the grid value with the highest validation accuracy (ties: the stronger ridge).
Solved in float64.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Probe:
    weight: torch.Tensor  # (K, D) float32, as nn.Linear stores it
    bias: torch.Tensor  # (K,)
    reg: float  # the chosen lambda
    val_acc: float  # accuracy on the validation split at that lambda
    val_acc_by_reg: dict[float, float]

    def logits(self, features: torch.Tensor) -> torch.Tensor:
        """(N, D) -> (N, K) scores; the class with the largest is the prediction."""
        return features.float() @ self.weight.T + self.bias


def targets(labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    """(N,) class indices -> (N, K) in {-1, 1}: +1 at the label, -1 elsewhere."""
    return 2 * torch.nn.functional.one_hot(labels, num_classes).double() - 1


def least_squares(features: torch.Tensor, labels: torch.Tensor, num_classes: int, reg: float):
    """The ridge solution for one ``reg``: (weight (K, D), bias (K,)) in float64."""
    x = features.double()
    y = targets(labels, num_classes)
    x_mean, y_mean = x.mean(dim=0), y.mean(dim=0)
    centred = x - x_mean
    if centred.shape[1] <= PRIMAL_MAX_DIM:
        gram = centred.T @ centred  # (D, D)
        scale = max(gram.diagonal().mean().item(), 1e-12)  # trace(X^T X) / D
        eye = torch.eye(len(gram), dtype=gram.dtype)
        weight = torch.linalg.solve(gram + reg * scale * eye, centred.T @ (y - y_mean))  # (D, K)
    else:
        kernel = centred @ centred.T  # (n, n)
        scale = max(kernel.diagonal().sum().item() / centred.shape[1], 1e-12)  # the same trace, over D
        eye = torch.eye(len(kernel), dtype=kernel.dtype)
        weight = centred.T @ torch.linalg.solve(kernel + reg * scale * eye, y - y_mean)  # (D, K)
    return weight.T, y_mean - x_mean @ weight


PRIMAL_MAX_DIM = 8192  # above this many features the n x n dual replaces the D x D system (memory, not accuracy)


def accuracy(logits: torch.Tensor, labels: torch.Tensor) -> float:
    return (logits.argmax(dim=1) == labels).sum().item() / len(labels)


def fit_probe(
    features: torch.Tensor,
    labels: torch.Tensor,
    val_features: torch.Tensor,
    val_labels: torch.Tensor,
    num_classes: int,
    regs: list[float],
) -> Probe:
    """The probe on ``features``, its ridge chosen on the validation split from ``regs``."""
    best = None
    scores = {}
    for reg in sorted(regs, reverse=True):  # strongest first, so a tie keeps the stronger ridge
        weight, bias = least_squares(features, labels, num_classes, reg)
        scores[reg] = accuracy(val_features.double() @ weight.T + bias, val_labels)
        if best is None or scores[reg] > scores[best[0]]:
            best = (reg, weight, bias)
    reg, weight, bias = best
    return Probe(weight.float(), bias.float(), reg, scores[reg], scores)


def flat_pixels(image_set) -> torch.Tensor:
    """Normalised images as (N, C*H*W) vectors: the pixel probe's features."""
    return image_set.normalise(image_set.images).flatten(1)
