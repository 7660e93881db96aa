"""The paper's few-shot probe: the closed form is ridge regression to {-1, 1}^K, the ridge is chosen on
validation (ties: the stronger), and the test set plays no part."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pipeline.models.probe import fit_probe, least_squares, targets


def blobs(n_per_class: int, dim: int, seed: int, spread: float = 1.0):
    generator = torch.Generator().manual_seed(seed)
    centres = torch.tensor([[3.0] + [0.0] * (dim - 1), [0.0, 3.0] + [0.0] * (dim - 2), [-3.0] + [0.0] * (dim - 1)])
    labels = torch.arange(3).repeat_interleave(n_per_class)
    return centres[labels] + spread * torch.randn(len(labels), dim, generator=generator), labels


def test_targets_are_plus_one_at_the_label_and_minus_one_elsewhere():
    assert targets(torch.tensor([2, 0]), 3).tolist() == [[-1, -1, 1], [1, -1, -1]]


def test_the_closed_form_is_sklearns_ridge_on_centred_features():
    from sklearn.linear_model import Ridge

    features, labels = blobs(10, 5, seed=0)
    weight, bias = least_squares(features, labels, 3, reg=0.1)
    centred = features.double() - features.double().mean(0)
    alpha = 0.1 * (centred.T @ centred).diagonal().mean().item()  # the grid is in units of the mean eigenvalue
    ridge = Ridge(alpha=alpha).fit(features.double().numpy(), targets(labels, 3).numpy())
    np.testing.assert_allclose(weight.numpy(), ridge.coef_, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(bias.numpy(), ridge.intercept_, rtol=1e-9, atol=1e-12)


def test_the_ridge_is_chosen_on_validation_and_ties_keep_the_stronger():
    features, labels = blobs(10, 5, seed=0)
    val_features, val_labels = blobs(20, 5, seed=1)
    probe = fit_probe(features, labels, val_features, val_labels, 3, [1e-4, 1e-2, 1.0])
    assert set(probe.val_acc_by_reg) == {1e-4, 1e-2, 1.0}
    best = max(probe.val_acc_by_reg.values())
    assert probe.val_acc == best
    assert probe.reg == max(r for r, a in probe.val_acc_by_reg.items() if a == best)
    predicted = probe.logits(val_features).argmax(1)
    assert (predicted == val_labels).float().mean().item() == pytest.approx(probe.val_acc)


def test_separable_classes_are_all_found_and_the_probe_has_a_linear_heads_shape():
    features, labels = blobs(10, 5, seed=0, spread=0.3)
    val_features, val_labels = blobs(20, 5, seed=1, spread=0.3)
    probe = fit_probe(features, labels, val_features, val_labels, 3, [1e-3, 1.0])
    assert probe.val_acc == 1.0 and probe.reg == 1.0  # three well-separated blobs; a tie keeps the stronger ridge
    assert probe.weight.dtype == torch.float32 and probe.weight.shape == (3, 5) and probe.bias.shape == (3,)


def test_the_dual_form_gives_the_primal_solution_for_very_wide_features(monkeypatch):
    """The paper preset's pixel probe has 150,528 features: its D x D system would not fit in memory."""
    import pipeline.models.probe as probe

    features, labels = blobs(4, 40, seed=0)  # 12 images, 40 features: wider than tall
    primal = least_squares(features, labels, 3, reg=0.01)
    monkeypatch.setattr(probe, "PRIMAL_MAX_DIM", 10)
    dual = least_squares(features, labels, 3, reg=0.01)
    for a, b in zip(primal, dual, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-8, atol=1e-10)
