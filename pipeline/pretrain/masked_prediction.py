"""Masked patch prediction, the paper's self-supervised pilot (section 4.6 and Appendix B.1.2).

"We corrupt 50% of patch embeddings by either replacing their embeddings with a learnable [mask] embedding
(80%), a random other patch embedding (10%) or just keeping them as is (10%) [...] Finally we predict the
3-bit, mean color (i.e., 512 colors in total) of every corrupted patch using their respective patch
representations." For greyscale images the mean intensity in 2^bits levels is the target (8 classes at 3
bits); for C channels, (2^bits)^C. Trained on unlabeled images only; the pretrained ViT's features are its
mean patch token (the class token is never trained by this objective).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from pipeline.core import paths
from pipeline.core.logs import stage_log as log
from pipeline.core.pretraining import MaskedPatchConfig
from pipeline.data.images import ImageSet, load_split
from pipeline.data.subsets import SHOTS_KEY, require_per_class, sweep_train_set, val_set
from pipeline.models.vit import ViT, vit_config
from pipeline.pretrain.size_axis import few_shot
from pipeline.pretrain.trunks import Trunk, features
from pipeline.train.loop import Recording, count_parameters, train
from pipeline.train.runtime import Runtime, seed_everything
from pipeline.train.schedule import epoch_recipe


class MaskedPatchModel(nn.Module):
    """A ViT, a learned [mask] embedding and a linear head from each patch representation to its colour class."""

    def __init__(self, vit: ViT, bits: int) -> None:
        super().__init__()
        self.vit = vit
        config = vit.config
        self.bits = bits
        self.mask_token = nn.Parameter(torch.zeros(1, 1, config.hidden_dim).normal_(std=0.02))
        self.patch_head = nn.Linear(config.hidden_dim, (2**bits) ** config.in_channels)

    def targets(self, pixels: torch.Tensor) -> torch.Tensor:
        """uint8 (B, C, H, W) -> (B, N) class of each patch: its mean per channel in 2^bits levels."""
        size = self.vit.config.patch_size
        levels = 2**self.bits
        # (B, C, H, W) -> (B, C, H/P, W/P) mean per patch -> (B, C, N)
        means = F.avg_pool2d(pixels.float() / 255, size).flatten(2)
        quantised = (means * levels).floor().clamp(max=levels - 1).long()
        weights = levels ** torch.arange(quantised.shape[1], device=quantised.device)  # channel c in digit c
        return (quantised * weights.view(1, -1, 1)).sum(dim=1)

    def corrupt(self, patches: torch.Tensor, fraction: float, generator: torch.Generator):
        """(B, N, D) patch embeddings -> corrupted copy and the (B, N) mask of corrupted positions."""
        batch, n, _ = patches.shape
        chosen = torch.rand(batch, n, generator=generator).argsort(dim=1)[:, : math.ceil(fraction * n)]
        corrupted = torch.zeros(batch, n, dtype=torch.bool).scatter_(1, chosen, True)
        roll = torch.rand(batch, n, generator=generator)
        source = torch.randint(0, batch * n, (batch, n), generator=generator)  # another patch of the batch
        corrupted, roll, source = (t.to(patches.device) for t in (corrupted, roll, source))
        out = torch.where((corrupted & (roll < 0.8)).unsqueeze(-1), self.mask_token.to(patches.dtype), patches)
        other = patches.reshape(batch * n, -1)[source]  # (B, N, D)
        out = torch.where((corrupted & (roll >= 0.8) & (roll < 0.9)).unsqueeze(-1), other, out)
        return out, corrupted

    def loss(self, inputs: torch.Tensor, pixels: torch.Tensor, fraction: float, generator: torch.Generator):
        """Cross-entropy over the corrupted patches' colour classes, and how many of them were right."""
        vit = self.vit
        vit._check_input(inputs)
        # (B, C, H, W) -> (B, D, H/P, W/P) -> (B, N, D)
        patches = vit.conv_proj(inputs).flatten(2).transpose(1, 2)
        patches, corrupted = self.corrupt(patches, fraction, generator)
        tokens = torch.cat([vit.class_token.expand(len(patches), -1, -1), patches], dim=1)
        z, _ = vit.encoder(tokens)
        logits = self.patch_head(z[:, 1:])[corrupted]  # (number corrupted, classes)
        target = self.targets(pixels)[corrupted]
        loss = F.cross_entropy(logits.float(), target)
        return loss, (logits.detach().argmax(dim=1) == target).sum(), len(target)


def pretrain_masked_patch(
    model: MaskedPatchModel, images: ImageSet, cfg: MaskedPatchConfig, runtime: Runtime, generator: torch.Generator,
    on_record,
) -> list[dict]:  # fmt: skip
    """``cfg``'s epochs of masked patch prediction on ``images`` (labels unused), through the one training loop
    (:func:`pipeline.train.loop.train`: its optimiser, schedule, clipping and non-finite check); one record per epoch,
    ``train_loss`` and ``patch_acc`` over its corrupted patches."""
    recipe, steps_per_epoch = epoch_recipe(cfg, len(images), cfg.batch_size)

    def step_loss(model: MaskedPatchModel, index: torch.Tensor):
        pixels = images.images[index]
        inputs = runtime.to_device(images.normalise(pixels))
        return model.loss(inputs, runtime.to_device(pixels), cfg.mask_fraction, generator)

    def patch_record(record: dict) -> dict:
        return {"epoch": record["epoch"], "train_loss": record["train_loss"], "patch_acc": record["train_acc"]}

    recording = Recording(steps_per_epoch, on_record=lambda record: on_record(patch_record(record)),
                          description="masked patch")  # fmt: skip
    history = train(model, images.images, images.labels, recipe, runtime, generator, recording=recording,
                    step_loss=step_loss)  # fmt: skip
    return [patch_record(record) for record in history]


def pretrain_scored(
    model_name: str, cfg: MaskedPatchConfig, unlabeled: ImageSet, num_classes: int, runtime: Runtime, tracker,
    score: Callable[[Trunk], dict],
) -> tuple[ViT, dict]:  # fmt: skip
    """One masked-patch pretraining of ``cfg`` (seeded by ``cfg.seed``) of a ViT of preset ``model_name`` on
    ``unlabeled``, each epoch recorded to the open ``tracker``, then scored by ``score`` (the few-shot probe on
    its frozen trunk: ``{shots: result}``); returns the ViT and the run's record (its history and scores)."""
    generator = seed_everything(cfg.seed)
    vit = ViT(vit_config(model_name, num_classes=num_classes, pool="mean"))
    model = MaskedPatchModel(vit, cfg.bits).to(runtime.device)

    def report(record: dict) -> None:
        tracker.log_record(record)
        log.info(f"masked_patch seed {cfg.seed} epoch {record['epoch']}: loss {record['train_loss']:.4f}, "
                 f"patch accuracy {record['patch_acc']:.4f}")  # fmt: skip

    history = pretrain_masked_patch(model, unlabeled, cfg, runtime, generator, report)
    result = score(Trunk(vit.eval()))
    tracker.log_metrics({f"few_shot_{n}": r["mean"] for n, r in result.items()})
    log.info(f"masked_patch seed {cfg.seed} few-shot: " + ", ".join(f"{n}/class {r['mean']:.3f}"
                                                                     for n, r in result.items()))  # fmt: skip
    record = {"arch": "vit_masked_patch", "n_pretrain": len(unlabeled), "epochs": cfg.epochs,
              "trained_parameters": count_parameters(model), "history": history, "few_shot": result,
              "runtime": runtime.describe()}  # fmt: skip
    return vit, record


def masked_patch_inputs(max_shots: int, pool_only: bool) -> tuple[ImageSet, ImageSet]:
    """The unlabeled images masked patch prediction trains on (the pool's, and unless ``pool_only`` the target
    classes' training images; never their validation or test images), every label 0; and the target's training
    images, which the few-shot probe draws from (checked to hold ``max_shots`` per class before any training)."""
    pool, target = load_split(paths.PREPARED / "pool_train.pt"), sweep_train_set("offline", "pretrained")
    require_per_class(target, max_shots, SHOTS_KEY)
    images = pool.images if pool_only else torch.cat([pool.images, target.images])
    unlabeled = ImageSet(images, torch.zeros(len(images), dtype=torch.long), ["unlabeled"], pool.mean, pool.std)
    return unlabeled, target


def trunk_scorer(
    target: ImageSet, shots: list[int], seeds: list[int], regs: list[float], runtime: Runtime, batch_size: int
) -> Callable[[Trunk], dict]:
    """The few-shot probe of the pretraining axis on a frozen trunk: each seed's ``shots`` per class of
    ``target``, the ridge chosen on validation, scored on the test set (``size_axis.few_shot``)."""
    val, test = val_set("pretrained"), load_split(paths.prepared_split("pretrained", "test"))

    def score(trunk: Trunk) -> dict:
        return few_shot(lambda image_set: features(trunk, image_set, runtime, batch_size), target, val, test, shots,
                        seeds, regs)  # fmt: skip

    return score
