"""The backbone: pretrained inside the pipeline (offline) or torchvision's ImageNet weights (paper). Loading it
frozen for the arms that build on it is :func:`pipeline.train.checkpoints.load_backbone`."""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from torch import nn

from pipeline.core import paths
from pipeline.core.config import PaperConfig
from pipeline.core.recipes import BackboneConfig
from pipeline.data.fetch import download
from pipeline.data.images import ImageSet, batch_preparer, load_split
from pipeline.pretrain.trunks import build_backbone
from pipeline.tracking.tracker import Tracker
from pipeline.train.checkpoints import load_torchvision_weights
from pipeline.train.loop import Recording, count_parameters, evaluate, train
from pipeline.train.runtime import Runtime, seed_everything
from pipeline.train.schedule import epoch_recipe

log = logging.getLogger(__name__)


def pretrain(
    cfg: BackboneConfig, model_name: str, runtime: Runtime, eval_batch_size: int, tracker: Tracker
) -> tuple[dict, list[dict], dict]:
    """Supervised pretraining of ViT ``model_name`` on the pool's classes (offline preset); returns the state
    dict, the per-epoch records and the summary for metrics/backbone.json."""
    pool_train, pool_test = load_split(paths.PREPARED / "pool_train.pt"), load_split(paths.PREPARED / "pool_test.pt")
    model, history = pretrain_on_pool("vit", model_name, (), (pool_train, pool_test), cfg, runtime, eval_batch_size,
                                      tracker, "backbone")  # fmt: skip
    state = {k: v.cpu() for k, v in model.state_dict().items()}
    summary = {
        "source": "pretrain",
        "pool_classes": pool_train.classes,
        "n_pretrain": len(pool_train),
        "pool_test_acc": history[-1]["test_acc"],
        "pool_test_loss": history[-1]["test_loss"],
        "params": count_parameters(model),
    }
    return state, history, summary


def pretrain_on_pool(
    arch: str, model_name: str, widths: tuple[int, ...], pool: tuple[ImageSet, ImageSet], cfg: BackboneConfig,
    runtime: Runtime, eval_batch_size: int, tracker: Tracker, description: str, score_every_epoch: bool = True,
) -> tuple[nn.Module, list[dict]]:  # fmt: skip
    """A backbone (``arch`` vit or resnet) seeded, built and trained by ``backbone``'s recipe on the pool's training
    split (``pool``: its train and test splits):
    the one function behind the backbone stage and every point of the pretraining-size axis, so the axis's
    whole-pool ViT is the backbone stage's model by construction (same function, seed, images and order:
    ``curve.seed_subset`` keeps the pool's order), and ``pretrain_scale`` reads it instead of training it again.
    Scoring the pool's test split every epoch or only after the last draws nothing from the generator."""
    generator = seed_everything(cfg.seed)
    model = build_backbone(arch, model_name, len(pool[0].classes), widths).to(runtime.device)
    history = train_on_pool(model, pool, cfg, runtime, generator, eval_batch_size, tracker, description,
                            score_every_epoch)  # fmt: skip
    return model, history


def train_on_pool(
    model: nn.Module, pool: tuple[ImageSet, ImageSet], cfg: BackboneConfig, runtime: Runtime,
    generator: torch.Generator, eval_batch_size: int, tracker: Tracker, description: str,
    score_every_epoch: bool = True,
) -> list[dict]:  # fmt: skip
    """``backbone``'s recipe on the pool: its epochs, batch, optimiser and augmentation, the pool's test set
    scored every epoch (logged as ``pool_test_*``), or only after the last where ``score_every_epoch`` is off
    (the pretraining-size axis reports the last alone). Returns the per-epoch records."""
    pool_train, pool_test = pool
    recipe, steps_per_epoch = epoch_recipe(cfg, len(pool_train), cfg.batch_size)
    last = recipe.steps
    scored = {"test": (pool_test.images, pool_test.labels)}

    def report(record: dict) -> None:
        if not score_every_epoch and record["step"] == last:
            result = evaluate(model, *scored["test"], runtime, eval_batch_size, batch_preparer(pool_train, False))
            record.update(test_loss=result.loss, test_acc=result.accuracy)
        # the pool's seven classes, not the target task: named apart from the arms' test_acc in MLflow
        tracker.log_record(record, prefix="pool_")
        log.info(
            f"{description} epoch {record['epoch']}: "
            + ", ".join(f"{k} {v:.4f}" for k, v in record.items() if k not in ("epoch", "step"))
        )

    recording = Recording(steps_per_epoch, scored if score_every_epoch else None, eval_batch_size, report,
                          description)  # fmt: skip
    return train(model, pool_train.images, pool_train.labels, recipe, runtime, generator,
                 prepare=batch_preparer(pool_train, cfg.augment), recording=recording)  # fmt: skip


def torchvision_weights(cfg: PaperConfig) -> tuple[dict, list[dict], dict]:
    """torchvision's weights at ``cfg.weights_url``, verified and loaded into our ViT (paper preset)."""
    path = download(cfg.weights_url, paths.DOWNLOADS / Path(cfg.weights_url).name, cfg.weights_sha256,
                    max_bytes=cfg.max_download_mb << 20, deadline_s=cfg.download_deadline_s)  # fmt: skip
    model = load_torchvision_weights(path, cfg.backbone_model, cfg.weights_url)
    summary = {"source": "torchvision", "url": cfg.weights_url, "params": count_parameters(model)}
    return model.state_dict(), [], summary
