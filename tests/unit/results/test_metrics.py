"""pipeline.results.metrics: per-image metrics, baselines and the predictions file."""

from __future__ import annotations

import pytest
import torch

from pipeline.results.metrics import collapse, majority_baseline, per_class, pixels_logreg

# --- metrics ---------------------------------------------------------------------------------


def test_collapse_is_the_share_of_the_most_predicted_class():
    assert collapse(torch.full((9,), 2)) == 1.0
    assert collapse(torch.tensor([0, 1, 2] * 4)) == pytest.approx(1 / 3)
    assert collapse(torch.tensor([0, 0, 0, 1])) == pytest.approx(0.75)


def test_summarise_averages_each_seeds_collapse_from_its_own_predictions():
    """metrics/evaluate.json's collapse comes from each seed's own predictions, never from the labels (balanced
    here, so always 1/3) nor from one seed's alone."""
    from torch import nn

    from pipeline.results.metrics import summarise
    from pipeline.train.loop import Evaluation

    labels = torch.tensor([0, 1, 2] * 4)
    one_class = Evaluation(nn.functional.one_hot(torch.full((12,), 2), 3).float(), 1.0, 1 / 3)  # share 1
    mostly_0 = Evaluation(nn.functional.one_hot(torch.tensor([0] * 9 + [1, 2, 1]), 3).float(), 1.0, 1 / 3)  # 9/12
    result = summarise({0: one_class, 1: mostly_0}, labels, ["a", "b", "c"], nn.Linear(2, 3), 9, 9)
    assert result["collapse"] == pytest.approx((1 + 0.75) / 2)


def test_majority_baseline_predicts_the_most_frequent_training_class():
    assert majority_baseline(torch.tensor([0, 1, 1, 2]), torch.tensor([1, 1, 0, 2])) == pytest.approx(0.5)
    # ties go to the lowest class index
    assert majority_baseline(torch.tensor([2, 2, 0, 0]), torch.tensor([0, 2, 2, 2])) == pytest.approx(0.25)


def test_per_class_reports_precision_recall_f1_and_zero_for_a_never_predicted_class():
    labels = torch.tensor([0, 0, 1, 1, 2, 2])
    predictions = torch.tensor([0, 0, 0, 1, 0, 1])
    report = per_class(labels, predictions, ["pizza", "steak", "sushi"])
    assert report["pizza"] == pytest.approx({"precision": 0.5, "recall": 1.0, "f1": 2 / 3})
    assert report["steak"] == pytest.approx({"precision": 0.5, "recall": 0.5, "f1": 0.5})
    assert report["sushi"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0}


def test_pixels_logreg_separates_dark_from_bright_images():
    generator = torch.Generator().manual_seed(0)
    dark = torch.randint(0, 60, (20, 1, 4, 4), dtype=torch.uint8, generator=generator)
    bright = torch.randint(190, 256, (20, 1, 4, 4), dtype=torch.uint8, generator=generator)
    images, labels = torch.cat([dark, bright]), torch.tensor([0] * 20 + [1] * 20)
    train_index, test_index = torch.arange(0, 40, 2), torch.arange(1, 40, 2)
    assert pixels_logreg(images[train_index], labels[train_index], images[test_index], labels[test_index]) == 1.0
    # the score is the test accuracy: swapped test labels must score 0
    assert pixels_logreg(images[train_index], labels[train_index], images[test_index], 1 - labels[test_index]) == 0.0


def test_predictions_csv_numbers_classes_so_a_text_sort_keeps_class_order():
    """DVC's confusion template sorts its axes as text: ``Shirt, Coat, Pullover`` would come out alphabetical,
    the numbered names keep the class order (and stay in order past nine classes)."""
    from pipeline.results.metrics import predictions_csv

    classes = ["Shirt", "Coat", "Pullover"]
    text = predictions_csv(torch.tensor([0, 2]), {0: torch.tensor([1, 2]), 3: torch.tensor([0, 0])}, classes)
    assert text.splitlines() == [
        "seed,actual,predicted",
        "0,1 Shirt,2 Coat",
        "0,3 Pullover,3 Pullover",
        "3,1 Shirt,1 Shirt",
        "3,3 Pullover,1 Shirt",
    ]
    many = [f"c{i}" for i in range(12)]
    rows = predictions_csv(torch.arange(12), {0: torch.arange(12)}, many).splitlines()[1:]
    actual = [row.split(",")[1] for row in rows]
    assert sorted(actual) == actual and actual[0] == "01 c0" and actual[-1] == "12 c11"
