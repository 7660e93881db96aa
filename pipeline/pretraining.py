"""The backbone: pretrained inside the pipeline (offline) or torchvision's ImageNet weights (paper), and
loading it frozen for the arms that build on it."""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from torch import nn

from pipeline import paths
from pipeline.config import BackboneConfig, PaperConfig
from pipeline.data import ImageSet, batch_preparer, load_split
from pipeline.engine import Recipe, count_parameters, epoch_steps, evaluate, train
from pipeline.errors import UserError
from pipeline.fetch import download
from pipeline.files import load_tensors
from pipeline.model import ViT, state_dict_mismatch, vit_config
from pipeline.runtime import Runtime, seed_everything
from pipeline.tracking import Tracker

log = logging.getLogger(__name__)


def pretrain(
    cfg: BackboneConfig, model_name: str, runtime: Runtime, eval_batch_size: int, tracker: Tracker
) -> tuple[dict, list[dict], dict]:
    """Supervised pretraining of ViT ``model_name`` on the pool's classes (offline preset); returns the state
    dict, the per-epoch records and the summary for metrics/backbone.json."""
    pool_train, pool_test = load_split(paths.PREPARED / "pool_train.pt"), load_split(paths.PREPARED / "pool_test.pt")
    generator = seed_everything(cfg.seed)
    model = ViT(vit_config(model_name, num_classes=len(pool_train.classes))).to(runtime.device)
    history = train_on_pool(model, pool_train, pool_test, cfg, runtime, generator, eval_batch_size, tracker, "backbone")
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


def train_on_pool(
    model: nn.Module, pool_train: ImageSet, pool_test: ImageSet, cfg: BackboneConfig, runtime: Runtime,
    generator: torch.Generator, eval_batch_size: int, tracker: Tracker, description: str,
    score_every_epoch: bool = True,
) -> list[dict]:  # fmt: skip
    """``backbone``'s recipe on the pool: its epochs, batch, optimiser and augmentation, the pool's test set
    scored every epoch (logged as ``pool_test_*``), or only after the last where ``score_every_epoch`` is off
    (the pretraining-size axis reports the last alone). Returns the per-epoch records."""
    steps_per_epoch = epoch_steps(1, len(pool_train), cfg.batch_size)
    recipe = Recipe.of(cfg, cfg.batch_size, cfg.epochs * steps_per_epoch)
    last = recipe.steps
    scored = {"test": (pool_test.images, pool_test.labels)}

    def report(record: dict) -> None:
        if not score_every_epoch and record["step"] == last:
            result = evaluate(model, *scored["test"], runtime, eval_batch_size, batch_preparer(pool_train, False))
            record.update(test_loss=result.loss, test_acc=result.accuracy)
        # the pool's seven classes, not the target task: named apart from the arms' test_acc in MLflow
        pool = {k.replace("test_", "pool_test_"): v for k, v in record.items() if k not in ("epoch", "step")}
        tracker.log_metrics(pool, step=record["epoch"])
        log.info(
            f"{description} epoch {record['epoch']}: "
            + ", ".join(f"{k} {v:.4f}" for k, v in record.items() if k not in ("epoch", "step"))
        )

    return train(
        model, pool_train.images, pool_train.labels, recipe, runtime, generator,
        prepare=batch_preparer(pool_train, cfg.augment), record_every=steps_per_epoch,
        evaluations=scored if score_every_epoch else None, eval_batch_size=eval_batch_size,
        on_record=report, description=description,
    )  # fmt: skip


def torchvision_weights(cfg: PaperConfig) -> tuple[dict, list[dict], dict]:
    """torchvision's weights at ``cfg.weights_url``, verified and loaded into our ViT (paper preset)."""
    path = download(cfg.weights_url, paths.DOWNLOADS / Path(cfg.weights_url).name, cfg.weights_sha256,
                    max_bytes=cfg.max_download_mb << 20, deadline_s=cfg.download_deadline_s)  # fmt: skip
    state = load_tensors(path)
    head = state.get("heads.head.weight")
    model = ViT(vit_config(cfg.backbone_model, num_classes=head.shape[0] if head is not None else 1000))
    try:
        model.load_state_dict(state, strict=True)  # torchvision's legacy MLP names load too (model.MLPBlock)
    except RuntimeError:
        raise UserError(
            f"the weights at {cfg.weights_url} do not fit paper.backbone_model {cfg.backbone_model!r} "
            f"({state_dict_mismatch(model, state)}); check that paper.weights_url and paper.backbone_model "
            "name the same architecture"
        ) from None
    summary = {"source": "torchvision", "url": cfg.weights_url, "params": count_parameters(model)}
    return model.state_dict(), [], summary


def load_backbone(model_name: str, runtime: Runtime, source: str) -> ViT:
    """Our ViT of preset ``model_name`` with a pretrained backbone's weights, frozen and in eval mode:
    ``source`` supervised (``models/backbone.pt``) or masked_patch (``models/masked_patch.pt``, whose features
    are its mean patch token, the representation that objective trains)."""
    path = paths.BACKBONES[source]
    state = load_tensors(path)
    if not state:
        raise UserError(f"{path} holds no weights (its stage ran for the paper preset); set offline.backbone: "
                        "supervised, or run the offline preset")  # fmt: skip
    num_classes = state["heads.head.weight"].shape[0]
    pool = "mean" if source == "masked_patch" else "cls"
    backbone = ViT(vit_config(model_name, num_classes=num_classes, pool=pool))
    try:
        backbone.load_state_dict(state, strict=True)
    except RuntimeError as error:
        stage = "backbone" if source == "supervised" else "masked_patch"
        raise UserError(
            f"{path} does not fit model {model_name!r} ({str(error).splitlines()[0]}); "
            f"rerun the {stage} stage (`dvc repro {stage}`)"
        ) from None
    backbone.requires_grad_(False)
    return backbone.to(runtime.device).eval()
