"""pipeline.results.synthetic_axis: H1-H3 as pre-registered, the pixel statistics and the CSV of both axes."""

from __future__ import annotations

import pytest
import torch

from pipeline.results.stats import paired_difference
from pipeline.results.synthetic_axis import gather, hypothesis_verdicts, pixel_statistics, scale_csv


def test_a_hypothesis_is_met_only_with_its_whole_interval_above_zero_and_its_backbones_used():
    ahead, level = paired_difference([0.5, 0.6, 0.55], [0.4, 0.45, 0.42]), paired_difference([0.5, 0.4], [0.45, 0.45])
    result = hypothesis_verdicts(
        {"H1": (ahead, True), "H2": (level, True), "H3": (ahead, False)}, dict.fromkeys(("H1", "H2", "H3"), "x")
    )
    assert [result[name]["met"] for name in ("H1", "H2", "H3")] == [True, False, False]
    assert result["H1"]["rule"] == "x: MET if the paired 95% interval is above 0" and not result["H3"]["backbones_used"]


SEEDS = [0, 1, 2]


def few_shot(per_seed: list[float]) -> dict:
    return {"2": {"mean": sum(per_seed) / len(per_seed), "std": 0.0, "per_seed": per_seed}}


def point(n: int, per_seed: list[float]) -> dict:
    return {"n_train_per_class": n, "test_acc": {"per_seed": per_seed}, "runs": {"0": {}, "1": {}, "2": {}}}


def test_gather_tests_the_three_hypotheses_on_the_files_of_the_study():
    sizes = {0: 10, 1: 100, 2: 1000}
    gains = {"vit": 0.1, "resnet": 0.0}
    cells = [(arch, p, n) for arch in gains for p, n in sizes.items()]
    pretrained = [{"arch": arch, "n_pretrain": n, "held_out_acc": 0.5, "best_step": 4, "used": True, "seeds": SEEDS,
                   "few_shot": few_shot([0.4 + gains[arch] * p + s / 100 for s in range(3)])}
                  for arch, p, n in cells]  # fmt: skip
    finetuned = [{"arch": arch, "point": p, "n_pretrain": n, "seeds": SEEDS, "linear": {"75": point(75, [0.5] * 3)},
                  "finetune": {"75": point(75, [0.7, 0.72, 0.71])}} for arch, p, n in cells]  # fmt: skip
    fashion = {"vit": {}, "resnet": {}, "pixels": few_shot([0.45, 0.5, 0.55]), "seeds": SEEDS}
    metrics = gather(pretrained, finetuned, fashion, {"75": point(75, [0.6, 0.61, 0.6])}, primary=2)
    hypotheses = metrics["hypotheses"]
    assert hypotheses["H1"]["difference"]["mean"] == pytest.approx(0.1)  # 0.1 a decade against 0
    assert hypotheses["H2"]["difference"]["mean"] == pytest.approx(0.6 + 0.01 - 0.5)  # at 1,000 images
    assert hypotheses["H3"]["difference"]["mean"] == pytest.approx(0.71 - 0.6033333)
    assert all(h["met"] for h in hypotheses.values())
    rows = scale_csv(metrics).splitlines()
    assert rows[0] == "source,arch,n_pretrain,shots,test_acc,test_acc_std" and len(rows) == 1 + 6


def test_pixel_statistics_are_in_zero_one_with_the_share_of_lit_pixels():
    images = torch.zeros(2, 1, 2, 2, dtype=torch.uint8)
    images[0, 0, 0, 0] = 255
    stats = pixel_statistics(images)
    assert stats["mean"] == pytest.approx(1 / 8) and stats["fill"] == {"mean": 0.125, "min": 0.0, "max": 0.25}
