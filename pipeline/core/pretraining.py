"""The pretraining sections of ``params.yaml`` beyond ``backbone``: the pretraining-size axis, issue 38's synthetic
study and masked patch prediction (:mod:`pipeline.core.config` gathers them into ``Params``)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from pipeline.core.errors import require
from pipeline.core.recipes import EpochRecipe


@dataclass(frozen=True)
class PretrainingScaleConfig:
    """The pretraining-size axis (paper Figures 3 and 4, in miniature): supervised backbones of each
    architecture on nested subsets of the pool, all trained by ``backbone``'s recipe (the same epochs, so
    every image is seen equally often), scored by the few-shot probe on the target classes."""

    points: list[int]  # dvc.yaml's matrix items, one per pool size
    pool_per_class: list[int]  # images per pool class at each point (7 classes)
    shots: list[int]  # few-shot probe sizes, images per target class; each seed draws its own

    def validate(self, key: str) -> None:
        require(self.points == list(range(len(self.points))) and len(self.points) >= 1, f"{key}.points",
                f"must be 0, 1, ..., n-1 (dvc.yaml's matrix items), got {self.points}")  # fmt: skip
        require(len(self.pool_per_class) == len(self.points), f"{key}.pool_per_class",
                f"must list one size per point ({len(self.points)}), got {len(self.pool_per_class)}")  # fmt: skip
        for name in ("pool_per_class", "shots"):
            values = getattr(self, name)
            require(len(values) >= 1 and values[0] >= 1 and all(a < b for a, b in itertools.pairwise(values)),
                    f"{key}.{name}", f"must be positive and strictly increasing, got {values}")  # fmt: skip


@dataclass(frozen=True)
class SyntheticConfig:
    """Issue 38's opt-in study (docs/synthetic.md, written before its first full run): FractalDB-style categories
    rendered once, ViT and ResNet backbones pretrained on nested sizes by ``backbone``'s recipe for the same
    ``steps`` at every size, then scored on the target like the pretraining-size axis and by fine-tuning."""

    seed: int  # the categories and every instance
    categories: int
    per_category: list[int]  # instances per category at each point: the axis's sizes, nested
    held_out_per_category: int  # the instances after the largest size's: pretraining's own validation
    points: list[int]  # the study's dvc.yaml matrix items, one per size
    steps: int  # the same at every size (equal compute)
    scores: int  # held-out accuracy scored every steps / scores steps; the best score's weights are kept
    min_held_out_acc: float  # a backbone below it is not used
    primary_shots: int  # H1 and H2's shots per class: one of pretraining_scale.shots

    def validate(self, key: str) -> None:
        require(self.points == list(range(len(self.per_category))) and len(self.points) >= 2, f"{key}.points",
                f"must be 0, 1, ..., n-1 with one size per point (at least two), got {self.points}")  # fmt: skip
        require(self.per_category[0] >= 1 and all(a < b for a, b in itertools.pairwise(self.per_category)),
                f"{key}.per_category",
                f"must be positive and strictly increasing, got {self.per_category}")  # fmt: skip
        require(self.categories >= 2, f"{key}.categories", f"must be at least 2, got {self.categories}")
        require(self.held_out_per_category >= 1, f"{key}.held_out_per_category", "must be at least 1")
        require(1 <= self.scores <= self.steps and self.steps % self.scores == 0, f"{key}.scores",
                f"must divide {key}.steps ({self.steps}) into whole intervals, got {self.scores}")  # fmt: skip
        require(0 <= self.min_held_out_acc < 1, f"{key}.min_held_out_acc", "must be in [0, 1)")
        require(0 <= self.seed < 2**32, f"{key}.seed", f"must be from 0 to 4294967295, got {self.seed}")


@dataclass(frozen=True)
class MaskedPatchConfig(EpochRecipe):
    """Masked patch prediction (paper section 4.6) on the unlabeled training images of all ten classes, with
    its go/no-go rule written before its first run."""

    mask_fraction: float  # share of patch embeddings corrupted: 80% mask token, 10% another patch, 10% kept
    bits: int  # the target: each corrupted patch's mean intensity per channel, quantised to this many bits
    seed: int
    decision_shots: int  # go if its validation few-shot accuracy here beats the supervised ViT on the whole pool
    # issue 21's stretch, pre-registered: the same recipe for more epochs (stage masked_patch_long), a success if
    # its few-shot probe at stretch_shots beats the pixel probe on the test set, paired interval above zero
    stretch_epochs: int
    stretch_shots: int
    # issue 37's backbone variance: more pretraining seeds of this recipe (stage masked_patch_seeds); the curve's
    # seed i uses backbone i mod k, k = 1 + len(extra_seeds), backbone 0 the masked_patch stage's
    extra_seeds: list[int]

    def validate(self, key: str) -> None:
        super().validate(key)
        seeds = [self.seed, *self.extra_seeds]
        require(len(set(seeds)) == len(seeds), f"{key}.extra_seeds",
                f"must not repeat a seed or {key}.seed ({self.seed}), got {self.extra_seeds}")  # fmt: skip
        require(0 < self.mask_fraction < 1, f"{key}.mask_fraction", "must be in (0, 1)")
        require(1 <= self.bits <= 8, f"{key}.bits", "must be between 1 and 8")
        require(self.stretch_epochs > self.epochs, f"{key}.stretch_epochs",
                f"must be more than {key}.epochs ({self.epochs}), got {self.stretch_epochs}")  # fmt: skip
