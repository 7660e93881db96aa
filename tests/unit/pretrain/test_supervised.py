"""pipeline.pretrain.supervised: the backbone pretrained on the pool, by the one function behind the backbone stage and
the pretraining-size axis."""

from __future__ import annotations

import torch
from helpers import CPU, params_with

from pipeline.core import paths
from pipeline.data.images import ImageSet, batch_preparer
from pipeline.models.vit import ViT
from pipeline.pretrain.supervised import pretrain, pretrain_on_pool
from pipeline.pretrain.trunks import build_backbone
from pipeline.train.loop import count_parameters, evaluate
from pipeline.train.runtime import seed_everything

CLASSES = ["c0", "c1", "c2", "c3"]  # the pool's classes: four here, not the target task's three


def pool_set(per_class: int, seed: int) -> ImageSet:
    generator = torch.Generator().manual_seed(seed)
    labels = torch.arange(len(CLASSES)).repeat_interleave(per_class)
    images = torch.randint(0, 80, (len(labels), 3, 32, 32), dtype=torch.uint8, generator=generator)
    images[torch.arange(len(labels)), labels % 3] += 150  # three of the four classes by their colour
    return ImageSet(images, labels, CLASSES, (0.5,) * 3, (0.25,) * 3)


class Records:
    """A tracker that keeps what it is asked to log."""

    def __init__(self) -> None:
        self.logged: list[tuple[str, dict]] = []

    def log_record(self, record: dict, step: str = "epoch", keys=None, prefix: str = "") -> None:
        self.logged.append((prefix, dict(record)))


def backbone_cfg():
    """Two epochs of 2 steps, at a rate that moves the pool's test accuracy between them (0.5, then 0.75)."""
    return params_with(backbone={"epochs": 2, "batch_size": 8, "seed": 3, "lr": 0.03, "warmup_fraction": 0.0}).backbone


def test_pretrain_on_pool_trains_the_seeded_backbone_and_scores_the_pool_the_same_either_way():
    """Every epoch scored, or only the last: the same weights (scoring draws nothing from the generator) and the
    same last score, which is the returned model's on the pool's test split."""
    cfg, pool_train, pool_test = backbone_cfg(), pool_set(4, seed=0), pool_set(2, seed=1)
    seed_everything(cfg.seed)
    initial = build_backbone("vit", "tiny", len(CLASSES), ()).state_dict()
    every = Records()
    model, history = pretrain_on_pool("vit", "tiny", (), (pool_train, pool_test), cfg, CPU, 8, every, "t")
    assert isinstance(model, ViT) and model.config.num_classes == len(CLASSES)
    assert [(r["epoch"], r["step"]) for r in history] == [(1, 2), (2, 4)]
    assert all({"test_acc", "test_loss", "train_loss"} <= set(r) for r in history)
    assert [prefix for prefix, _ in every.logged] == ["pool_", "pool_"]  # logged apart from the arms' test_acc
    trained = model.state_dict()
    assert not torch.equal(trained["heads.head.weight"], initial["heads.head.weight"])  # it trained
    scored = evaluate(model, pool_test.images, pool_test.labels, CPU, 8, batch_preparer(pool_test, False))
    assert (history[-1]["test_acc"], history[-1]["test_loss"]) == (scored.accuracy, scored.loss)

    last_only = Records()
    again, last_history = pretrain_on_pool("vit", "tiny", (), (pool_train, pool_test), cfg, CPU, 8, last_only, "t",
                                           score_every_epoch=False)  # fmt: skip
    assert all(torch.equal(v, again.state_dict()[k]) for k, v in trained.items())
    assert "test_acc" not in last_history[0]
    assert last_history[-1] == history[-1]  # the same step, train and test numbers
    assert [prefix for prefix, _ in last_only.logged] == ["pool_", "pool_"]


def test_the_pool_axis_resnet_has_its_widths_and_the_pools_classes():
    cfg, pool_train, pool_test = backbone_cfg(), pool_set(2, seed=0), pool_set(1, seed=1)
    model, history = pretrain_on_pool("resnet", "tiny", (4, 8), (pool_train, pool_test), cfg, CPU, 8, Records(), "r",
                                      score_every_epoch=False)  # fmt: skip
    assert [m.out_channels for m in model.modules() if isinstance(m, torch.nn.Conv2d)][:1] == [4]
    assert model[-1].out_features == len(CLASSES) and model[-1].in_features == 8
    assert len(history) == 2 and "test_acc" in history[-1]


def test_pretrain_reads_the_prepared_pool_and_summarises_its_last_epoch(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    pool_set(4, seed=0).save(paths.PREPARED / "pool_train.pt")
    pool_set(2, seed=1).save(paths.PREPARED / "pool_test.pt")
    cfg = backbone_cfg()
    state, history, summary = pretrain(cfg, "tiny", CPU, 8, Records())
    assert history[0]["test_acc"] != history[-1]["test_acc"]  # so the summary's epoch shows
    model, expected = pretrain_on_pool("vit", "tiny", (), (pool_set(4, 0), pool_set(2, 1)), cfg, CPU, 8, Records(), "b")
    assert history == expected and all(torch.equal(v, model.state_dict()[k]) for k, v in state.items())
    assert set(state) == set(model.state_dict()) and all(v.device.type == "cpu" for v in state.values())
    assert summary == {"source": "pretrain", "pool_classes": CLASSES, "n_pretrain": 16,
                       "pool_test_acc": history[-1]["test_acc"], "pool_test_loss": history[-1]["test_loss"],
                       "params": count_parameters(model)}  # fmt: skip
