"""pipeline.pretrain.size_axis: the pretraining-size axis's metrics gathered from its items, the go/no-go, and its
CSV."""

from __future__ import annotations

import pytest

from pipeline.pretrain.size_axis import gather, scale_csv, stretch_outcome
from pipeline.results.headline import scale_comparisons


def shots(test: float, val: float) -> dict:
    return {"10": {"mean": test, "std": 0.01, "per_seed": [test], "val": {"mean": val, "std": 0.0, "per_seed": [val]}}}


def item(arch: str, n: int, test: float, val: float) -> dict:
    return {"arch": arch, "n_pretrain": n, "few_shot": shots(test, val), "pool_test_acc": 0.8, "trained_parameters": 9}


def axis(masked_val: float) -> dict:
    items = [item("vit", 100, 0.5, 0.5), item("vit", 1000, 0.6, 0.6), item("resnet", 100, 0.7, 0.7),
             item("resnet", 1000, 0.75, 0.72)]  # fmt: skip
    masked = {"n_pretrain": 1000, "few_shot": shots(0.55, masked_val), "trained_parameters": 8}
    return gather(items, masked, {"10": {"mean": 0.65, "std": 0.02}}, decision_shots=10)


def test_gather_keys_every_backbone_by_size_and_decides_against_the_vit_on_the_whole_pool():
    metrics = axis(masked_val=0.61)
    assert metrics["vit"]["1000"]["10"]["mean"] == 0.6 and metrics["resnet"]["100"]["10"]["mean"] == 0.7
    assert metrics["trained_parameters"] == {"vit": 9, "resnet": 9, "vit_masked_patch": 8}
    decision = metrics["decision"]
    assert (decision["supervised_val"], decision["masked_patch_val"], decision["go"]) == (0.6, 0.61, True)
    assert axis(masked_val=0.6)["decision"]["go"] is False  # a tie is no reason to switch
    assert axis(masked_val=0.55)["decision"]["go"] is False  # the largest pool's ViT, not the smaller one's 0.5


def test_the_csv_has_a_row_per_backbone_size_and_shots_and_the_pixel_probe_at_every_size():
    rows = scale_csv(axis(masked_val=0.61)).splitlines()
    assert rows[0] == "arch,n_pretrain,shots,test_acc,test_acc_std"
    assert rows[1:] == [
        "vit,100,10,0.5,0.01", "vit,1000,10,0.6,0.01", "resnet,100,10,0.7,0.01", "resnet,1000,10,0.75,0.01",
        "vit_masked_patch,1000,10,0.55,0.01", "pixels,100,10,0.65,0.02", "pixels,1000,10,0.65,0.02",
    ]  # fmt: skip


def per_seed_shots(tests: list[float]) -> dict:
    return {"10": {"mean": sum(tests) / len(tests), "std": 0.0, "per_seed": tests, "val": {"mean": 0.5}}}


@pytest.mark.parametrize(("longer", "success"), [([0.70, 0.72, 0.71], True), ([0.70, 0.60, 0.71], False)])
def test_the_stretch_succeeds_only_when_the_whole_paired_interval_against_pixels_is_above_zero(longer, success):
    items = [{"arch": arch, "n_pretrain": 1000, "few_shot": per_seed_shots([0.6, 0.61, 0.62]), "pool_test_acc": 0.8,
              "trained_parameters": 9} for arch in ("vit", "resnet")]  # fmt: skip
    masked = {"n_pretrain": 1000, "few_shot": per_seed_shots([0.55, 0.56, 0.57]), "trained_parameters": 8}
    masked_long = {"n_pretrain": 1000, "epochs": 9, "few_shot": per_seed_shots(longer)}
    pixels = per_seed_shots([0.65, 0.66, 0.64])
    metrics = gather(items, masked, pixels, decision_shots=10, masked_long=masked_long)
    assert metrics["vit_masked_patch_long"] == {"1000": masked_long["few_shot"]}
    assert metrics["vit_masked_patch_long_epochs"] == 9
    comparisons = scale_comparisons(metrics)
    gap = comparisons["vit_masked_patch_long-pixels"]["1000/10"]
    assert gap["per_seed"] == pytest.approx([a - b for a, b in zip(longer, pixels["10"]["per_seed"], strict=True)])
    default_gap = comparisons["vit_masked_patch_long-vit_masked_patch"]["1000/10"]["per_seed"]
    assert default_gap == pytest.approx([a - b for a, b in zip(longer, [0.55, 0.56, 0.57], strict=True)])
    outcome = stretch_outcome(metrics, comparisons, shots=10)
    assert outcome["difference"] == gap and outcome["success"] is success and "9 epochs" in outcome["rule"]
    assert "vit_masked_patch_long,1000,10," in scale_csv(metrics)
