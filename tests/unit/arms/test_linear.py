"""pipeline.arms.linear: the few-shot probe on the frozen backbone's features, one per seed, and the headline
linear probes' evaluation."""

from __future__ import annotations

import torch
from helpers import CPU, tiny_params
from tiny_project import SEEDS

from pipeline.arms import linear as linear_arm
from pipeline.arms.protocol import Curve
from pipeline.core import paths
from pipeline.core.files import load_tensors
from pipeline.data.images import ImageSet, batch_preparer
from pipeline.data.subsets import seed_subset
from pipeline.models.probe import accuracy, fit_probe
from pipeline.train.checkpoints import load_backbone
from pipeline.train.loop import extract_features


def frozen_features(image_set: ImageSet) -> torch.Tensor:
    backbone = load_backbone("tiny", CPU, "supervised")
    return extract_features(backbone, image_set.images, CPU, 4, batch_preparer(image_set, augment_train=False))


def test_a_seeds_probe_is_fit_probe_on_the_frozen_unaugmented_features_of_its_subset(curve_project):
    params = tiny_params()
    curve_ = Curve("paper", "tiny", "tiny", "supervised", params.data_hunger, 8, CPU)
    data_ = linear_arm.point_data(curve_, 2)
    assert not any(p.requires_grad for p in data_.backbone.parameters()) and not data_.backbone.training
    val_features, test_features = frozen_features(data_.val), frozen_features(data_.test)
    torch.testing.assert_close(data_.val_features, val_features)
    torch.testing.assert_close(data_.test_features, test_features)
    for seed in (0, 1):
        record = linear_arm.run_seed(curve_, data_, seed)
        train_set = seed_subset(data_.pool, data_.n, seed)
        probe = fit_probe(frozen_features(train_set), train_set.labels, val_features, data_.val.labels, 3,
                          params.data_hunger.probe_regs)  # fmt: skip
        fitted, _, subset = linear_arm.seed_probe(curve_, data_, seed)
        assert torch.equal(subset.images, train_set.images)
        torch.testing.assert_close(fitted.weight, probe.weight)
        torch.testing.assert_close(fitted.bias, probe.bias)
        assert (record["reg"], record["val_acc"]) == (probe.reg, probe.val_acc)
        assert record["score"]() == {"test_acc": accuracy(probe.logits(test_features), data_.test.labels)}
        assert record["trained_parameters"] == 32 * 3 + 3  # tiny's 32 features, three classes


def test_run_seed_fits_one_probe_per_seed_and_reuses_it(curve_project, monkeypatch):
    """Fine-tuning's lr trials start from the linear arm's probe: fitted once per seed and point, not per call."""
    curve_ = Curve("paper", "tiny", "tiny", "supervised", tiny_params().data_hunger, 8, CPU)
    data_ = linear_arm.point_data(curve_, 2)
    fitted = []

    def counted(*args, **kwargs):
        fitted.append(args[0])
        return fit_probe(*args, **kwargs)

    monkeypatch.setattr(linear_arm, "fit_probe", counted)
    first = linear_arm.run_seed(curve_, data_, 0)
    again = linear_arm.run_seed(curve_, data_, 0, lr=0.5)  # lr is unused
    assert len(fitted) == 1 and linear_arm.seed_probe(curve_, data_, 0)[0] is data_.probes[0][0]
    assert {k: v for k, v in first.items() if k != "score"} == {k: v for k, v in again.items() if k != "score"}
    linear_arm.run_seed(curve_, data_, 1)
    assert len(fitted) == 2 and not torch.equal(fitted[0], fitted[1])  # another seed, another subset


def test_each_seeds_headline_probe_is_scored_on_the_backbones_test_features(project):
    test_set = ImageSet.load(paths.prepared_split("pretrained", "test"))
    results, model = linear_arm.evaluate_linear("tiny", "supervised", SEEDS, test_set, CPU, 5)
    features = frozen_features(test_set)
    for seed in SEEDS:
        head = {k: v.detach() for k, v in load_tensors(paths.linear_probe(seed)).items()}
        logits = features @ head["heads.head.weight"].T + head["heads.head.bias"]
        torch.testing.assert_close(results[seed].logits, logits)
        assert results[seed].accuracy == accuracy(logits, test_set.labels)
    assert not torch.equal(results[SEEDS[0]].logits, results[SEEDS[1]].logits)
    torch.testing.assert_close(model.heads.head.weight, head["heads.head.weight"])  # the last seed's head


def test_with_several_backbones_seed_i_probes_and_fine_tunes_through_backbone_i_mod_k(curve_project):
    """Issue 37's backbone variance: a point holds each backbone's features; seed i's runs use backbone i mod k."""
    from pipeline.arms import finetune as finetune_arm
    from pipeline.arms.protocol import for_seed
    from pipeline.train.checkpoints import save_state

    state = load_tensors(paths.BACKBONE)
    other = {name: value + 0.05 * torch.randn_like(value) if value.is_floating_point() else value
             for name, value in state.items()}  # fmt: skip
    save_state(paths.masked_patch_seed(1), other)  # a second pretraining seed: other weights, same architecture
    params = tiny_params()
    curve_ = Curve("paper", "tiny", "tiny", "supervised", params.data_hunger, 8, CPU, backbones=2)
    data_ = linear_arm.point_data(curve_, 2)
    assert len(data_.by_backbone) == 2 and data_.backbone is data_.by_backbone[0][0]
    assert not torch.equal(data_.by_backbone[0][1], data_.by_backbone[1][1])  # each backbone's own features
    for seed, index in ((0, 0), (1, 1), (2, 0), (3, 1)):
        seen, chosen = for_seed(data_, seed)
        assert chosen == index and seen.backbone is data_.by_backbone[index][0]
        assert torch.equal(seen.test_features, data_.by_backbone[index][2])
    record = linear_arm.run_seed(curve_, data_, 1)
    train_set = seed_subset(data_.pool, data_.n, 1)
    features = extract_features(data_.by_backbone[1][0], train_set.images, CPU, 4, data_.score)
    probe = fit_probe(features, train_set.labels, data_.by_backbone[1][1], data_.val.labels, 3,
                      params.data_hunger.probe_regs)  # fmt: skip
    assert record["backbone"] == 1 and (record["reg"], record["val_acc"]) == (probe.reg, probe.val_acc)
    tuned = finetune_arm.run_seed(curve_, data_, 1, 0.001)
    assert tuned["backbone"] == 1 and tuned["reg"] == probe.reg
    one = Curve("paper", "tiny", "tiny", "supervised", params.data_hunger, 8, CPU)
    single = linear_arm.point_data(one, 2)  # one backbone: no index in its records, as before
    assert single.by_backbone == () and for_seed(single, 3) == (single, None)
    assert "backbone" not in linear_arm.run_seed(one, single, 1)
