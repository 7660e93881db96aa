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

import torch
import torch.nn.functional as F
from torch import nn

from pipeline.core.config import MaskedPatchConfig
from pipeline.data.images import ImageSet
from pipeline.models.vit import ViT
from pipeline.train.loop import Recording, train
from pipeline.train.runtime import Runtime
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
