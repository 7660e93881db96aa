"""Issue 38's backbones: the ViT or the small ResNet pretrained on a size of the synthetic categories
(docs/synthetic.md, written before the first full run).

``backbone``'s recipe (optimiser, rate, warmup, cosine, clipping, batch, crop and flip, seed), but the same
``steps`` at every size rather than its epochs: the paper's section 4.3 trains its Figure 4 subsets with "the same
hyper-parameters for all settings" and uses "early-stopping, and report[s] the best validation accuracy achieved
during training". So the held-out instances are scored ``scores`` times, evenly, and the weights of the best
held-out accuracy are the backbone kept."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from pipeline.core import paths
from pipeline.core.errors import UserError
from pipeline.core.recipes import BackboneConfig
from pipeline.data.images import ImageSet, batch_preparer
from pipeline.pretrain.size_axis import ARCHES
from pipeline.pretrain.trunks import build_backbone
from pipeline.train.checkpoints import fit, load_state
from pipeline.train.loop import Recording, train
from pipeline.train.runtime import Runtime, seed_everything
from pipeline.train.schedule import Recipe

STAGE = "studies/synthetic/dvc.yaml:synthetic_pretrain"


def arch_and_point(argv: list[str], points: list[int], stage: str) -> tuple[str, int]:
    """A study stage's arguments ``<arch> <point>``, or a usage line naming what is allowed."""
    if len(argv) != 2 or argv[0] not in ARCHES or not argv[1].isdigit() or int(argv[1]) not in points:
        raise UserError(f"usage: python -m pipeline.stages.{stage} <arch: {'|'.join(ARCHES)}> <point: one of "
                        f"{points}>, got {argv}")  # fmt: skip
    return argv[0], int(argv[1])


def model_path(arch: str, point: int) -> Path:
    return paths.SYNTHETIC_MODELS / f"{arch}_{point}.pt"


def pretrain_synthetic(
    arch: str, model_name: str, widths: tuple[int, ...], sets: tuple[ImageSet, ImageSet], cfg: BackboneConfig,
    steps: int, scores: int, runtime: Runtime, eval_batch_size: int, on_record: Callable[[dict], None],
) -> tuple[nn.Module, list[dict], dict]:  # fmt: skip
    """``arch`` trained from ``cfg.seed`` on ``sets`` (training size, held-out instances) for ``steps`` steps of
    ``cfg``'s recipe, the held-out set scored every ``steps // scores`` steps (``held_out_acc``, each record
    passed to ``on_record``). Returns the model with the best-scored weights (the first of equals), every
    record and the best one."""
    train_set, held_out = sets
    generator = seed_everything(cfg.seed)
    model = build_backbone(arch, model_name, len(train_set.classes), widths).to(runtime.device)
    best: dict = {"record": None, "state": None}

    def keep_best(record: dict) -> None:
        on_record(record)
        if best["record"] is None or record["held_out_acc"] > best["record"]["held_out_acc"]:
            best["record"], best["state"] = record, copy.deepcopy(model.state_dict())

    recipe = Recipe.of(cfg, cfg.batch_size, steps)
    recording = Recording(steps // scores, {"held_out": (held_out.images, held_out.labels)}, eval_batch_size,
                          keep_best, f"synthetic {arch} on {len(train_set):,}")  # fmt: skip
    history = train(model, train_set.images, train_set.labels, recipe, runtime, generator,
                    prepare=batch_preparer(train_set, cfg.augment), recording=recording)  # fmt: skip
    model.load_state_dict(best["state"])
    return model.eval(), history, best["record"]


def load_synthetic(
    arch: str, point: int, model_name: str, widths: tuple[int, ...], num_classes: int, runtime: Runtime
) -> nn.Module:
    """A backbone the synthetic_pretrain stage saved, frozen and in eval mode."""
    path = model_path(arch, point)
    model = build_backbone(arch, model_name, num_classes, widths)
    fit(model, load_state(path, STAGE), path, STAGE, f"the {arch} of {num_classes} categories")
    return model.requires_grad_(False).to(runtime.device).eval()


def state_of(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}
