"""pipeline.arms.finetune: linear probe, then fine-tune: the head starts as this seed's probe, the body as the
pretrained backbone."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import CPU, tiny_params

from pipeline.arms import finetune as finetune_arm
from pipeline.arms import linear as linear_arm
from pipeline.arms.protocol import Curve
from pipeline.data.subsets import seed_subset


def test_fine_tuning_starts_from_the_probe(curve_project):
    """At a vanishing learning rate the fine-tuned arm predicts what the linear probe does, image for image: the
    same accuracies and, on its training subset, the cross-entropy of the probe's own logits (the tiny backbone's
    features tell the classes apart too little for accuracy alone to show a head that is not the probe's)."""
    params = tiny_params(finetune={"lrs": [1e-12]})
    curve_ = Curve("paper", "tiny", "tiny", "supervised", params.data_hunger, 8, CPU)
    data_ = finetune_arm.point_data(curve_, 2)
    for seed in (0, 1):
        probe = linear_arm.run_seed(curve_, data_, seed)
        tuned = finetune_arm.run_seed(curve_, data_, seed, 1e-12)
        assert tuned["score"]()["test_acc"] == probe["score"]()["test_acc"] and tuned["reg"] == probe["reg"]
        fitted, features, train_set = linear_arm.seed_probe(curve_, data_, seed)
        probe_loss = F.cross_entropy(fitted.logits(features), train_set.labels).item()
        assert tuned["train_loss"] == pytest.approx(probe_loss, rel=1e-5)
        assert tuned["train_acc"] == probe["train_acc"]


def test_the_model_it_trains_is_the_backbone_with_this_seeds_probe_as_its_head_exactly(curve_project, monkeypatch):
    params = tiny_params()
    curve_ = Curve("paper", "tiny", "tiny", "supervised", params.data_hunger, 8, CPU)
    data_ = finetune_arm.point_data(curve_, 2)
    built = {}

    def fit_seed(curve, data, seed, lr, arm, build_model):  # what the trainer is handed, before any step
        built[seed] = (arm, lr, build_model(seed_subset(data.pool, data.n, seed)))
        return {"lr": lr}

    monkeypatch.setattr(finetune_arm, "fit_seed", fit_seed)
    backbone = {k: v for k, v in data_.backbone.state_dict().items() if not k.startswith("heads.")}
    for seed in (0, 1):
        result = finetune_arm.run_seed(curve_, data_, seed, 0.001)
        probe, _, _ = linear_arm.seed_probe(curve_, data_, seed)
        arm, lr, model = built[seed]
        assert (arm, lr, result) == ("finetune", 0.001, {"lr": 0.001, "reg": probe.reg})
        head = model.heads.head
        assert torch.equal(head.weight, probe.weight.to(head.weight.dtype))
        assert torch.equal(head.bias, probe.bias.to(head.bias.dtype))
        state = model.state_dict()
        assert all(torch.equal(state[k], v) for k, v in backbone.items())  # every other weight the backbone's
        assert all(p.requires_grad for p in model.parameters())  # and all of them train
    assert not torch.equal(built[0][2].heads.head.weight, built[1][2].heads.head.weight)  # each seed its own probe
