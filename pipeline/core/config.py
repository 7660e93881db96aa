"""``params.yaml`` parsed once into frozen dataclasses that reject unknown keys and bad values."""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
from dataclasses import dataclass
from typing import Literal

from pipeline.core.arm_registry import ARMS, DECAY_VARIANTS, TRAINED
from pipeline.core.errors import require
from pipeline.core.pretraining import MaskedPatchConfig, PretrainingScaleConfig, SyntheticConfig
from pipeline.core.recipes import BackboneConfig, EpochRecipe, GridOptimiser, ScratchRecipe

FASHION_MNIST_CLASSES = (
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
)  # fmt: skip


@dataclass(frozen=True)
class RuntimeConfig:
    device: Literal["auto", "cpu", "cuda", "mps"]
    precision: Literal["auto", "bf16", "fp32"]
    threads: int
    distributed: Literal["auto", "off"]  # auto: DistributedDataParallel when started by torchrun

    def validate(self, key: str) -> None:
        require(self.threads >= 1, f"{key}.threads", "must be at least 1")


@dataclass(frozen=True)
class OfflineConfig:
    debian_dir: str
    mirror: bool
    classes: list[str]
    train_per_class: int
    model: str
    backbone: Literal["supervised", "masked_patch"]  # the transfer arms' backbone (pretrained in the pipeline)

    def validate(self, key: str) -> None:
        unknown = [c for c in self.classes if c not in FASHION_MNIST_CLASSES]
        require(
            not unknown, f"{key}.classes", f"has unknown class(es) {unknown}; choose from {list(FASHION_MNIST_CLASSES)}"
        )
        require(
            len(set(self.classes)) == len(self.classes),
            f"{key}.classes",
            f"must not repeat a class, got {self.classes}",
        )
        require(len(self.classes) >= 2, f"{key}.classes", "needs at least two different classes")
        require(
            len(set(self.classes)) < 10, f"{key}.classes", "must leave at least one class to pretrain the backbone on"
        )
        require(1 <= self.train_per_class <= 6000, f"{key}.train_per_class", "must be between 1 and 6000")
        _check_model(self.model, f"{key}.model")


@dataclass(frozen=True)
class PaperConfig:
    url: str
    sha256: str
    folder: str
    max_extract_mb: int
    max_download_mb: int  # the dataset's zip and the weights: refused over this
    download_deadline_s: float  # every download, its retries included, ends by then
    model: str
    backbone_model: str
    weights_url: str
    weights_sha256: str

    def validate(self, key: str) -> None:
        _check_url(self.url, f"{key}.url")
        _check_url(self.weights_url, f"{key}.weights_url")
        require(
            re.fullmatch(r"[0-9a-f]{64}", self.sha256) is not None, f"{key}.sha256", "must be 64 lowercase hex digits"
        )
        require(re.fullmatch(r"[0-9a-f]{8,64}", self.weights_sha256) is not None, f"{key}.weights_sha256",
                "must be 8 to 64 lowercase hex digits (a sha256 or its prefix)")  # fmt: skip
        require(self.folder.strip() != "", f"{key}.folder", "must name a folder: data/paper_folder (the default: "
                "while it holds no images, the pinned zip paper.url is used) or a folder of your own")  # fmt: skip
        require(self.max_extract_mb > 0, f"{key}.max_extract_mb", "must be positive")
        require(self.max_download_mb > 0, f"{key}.max_download_mb", "must be positive")
        deadline_ok = 0 < self.download_deadline_s < math.inf
        require(deadline_ok, f"{key}.download_deadline_s", "must be positive and finite")
        _check_model(self.model, f"{key}.model")
        _check_model(self.backbone_model, f"{key}.backbone_model")


class _PerPreset:
    """A section with one subsection per preset (``offline``, ``paper``), each validated under its own key."""

    def validate(self, key: str) -> None:
        for preset in ("offline", "paper"):
            getattr(self, preset).validate(f"{key}.{preset}")


@dataclass(frozen=True)
class TrainScratchConfig(_PerPreset):
    offline: ScratchRecipe
    paper: ScratchRecipe


@dataclass(frozen=True)
class LinearProbeConfig(_PerPreset):
    offline: EpochRecipe  # seed 000's linear head: Adam, lr 1e-3, batch 32, 10 epochs
    paper: EpochRecipe


@dataclass(frozen=True)
class ImagesConfig:
    max_pixels: int

    def validate(self, key: str) -> None:
        require(self.max_pixels >= 1, f"{key}.max_pixels", f"must be at least 1, got {self.max_pixels}")


@dataclass(frozen=True)
class EvaluateConfig:
    batch_size: int

    def validate(self, key: str) -> None:
        require(self.batch_size >= 1, f"{key}.batch_size", "must be at least 1")


@dataclass(frozen=True)
class ValidationConfig:
    """Images per class held out of the target's training images: every trained arm's early stopping, learning
    rate and probe regularisation are chosen on them; they are never trained on, and never the test set."""

    offline_per_class: int
    paper_per_class: int

    def validate(self, key: str) -> None:
        for name in ("offline_per_class", "paper_per_class"):
            require(getattr(self, name) >= 1, f"{key}.{name}", f"must be at least 1, got {getattr(self, name)}")
        require(self.offline_per_class < 6000, f"{key}.offline_per_class",
                "must leave training images (Fashion-MNIST has 6000 per class)")  # fmt: skip


@dataclass(frozen=True)
class _DataHungerShared:
    """data_hunger's values shared by every arm; :data:`DataHungerConfig` adds one optimiser per trained arm."""

    points: list[int]
    offline_sizes: list[int]
    paper_fractions: list[float]
    headline_point: int  # the point evaluate's table shows beside seed 000's arms (75 per class offline)
    # the primary comparisons, named before the rerun that tests them: each pair ("<arm>-<arm>") at each point;
    # comparisons.json gives them Holm's step-down over this family alone beside the whole family's
    primary_comparisons: list[str]
    primary_points: list[int]
    # the learning rate's choice (pipeline.arms.protocol.Choice): every candidate on the first choice_seeds seeds,
    # the best mean validation score chosen; a candidate prune_z standard errors behind on the first seed stops there
    choice_seeds: int
    prune_z: float
    # ... and only the choice_keep best on the first seed train on the others (0: no such limit): successive
    # halving's second rung
    choice_keep: int
    # the images per class a run scores while it trains (its plateau rule and kept weights; 0: the whole
    # validation split); the kept weights are scored on the whole split once, for the choice
    monitor_per_class: int
    batch_size: int
    max_epochs: int  # the budget: a run's step cap and its schedule's span, in passes over its training set...
    min_steps: int  # ... and never fewer steps than this (at 10 per class an epoch is one step)
    scores: int  # validation scores per run, evenly spaced over the budget, besides step 0's
    patience: int  # validation scores without a better one before a run stops (plateau: the default window)
    plateau_window: int  # plateau schedule: scores in each of the two windows whose means its rule compares
    plateau_score: Literal["loss", "accuracy"]  # plateau schedule: the validation score those windows compare
    cap_factor: int  # plateau schedule: a run may train up to this many budgets before it must stop
    cooldown_fraction: float  # plateau schedule: the decay's length, as a fraction of the steps before it
    probe_regs: list[float]  # the few-shot probe's ridge grid, times the mean eigenvalue of X^T X
    logreg_max_per_class: int
    cnn_widths: list[int]

    def budget(self, n_train: int) -> tuple[int, int]:
        """(budget, steps between validation scores) of a trained run on ``n_train`` images: ``max_epochs``
        passes at ``batch_size``, at least ``min_steps``; ``scores`` scores are spread over the budget, so every
        run is scored as often whatever its size. A cosine schedule spans the budget, which is then its step
        cap; a plateau schedule warms up over the same share of it and may run to :meth:`cap`."""
        steps = max(self.min_steps, self.max_epochs * math.ceil(n_train / self.batch_size))
        return steps, max(1, math.ceil(steps / self.scores))

    def cap(self, arm: str, budget: int) -> int:
        """The step cap of ``arm``'s runs of this ``budget``: the budget itself, or ``cap_factor`` budgets for a
        plateau schedule (whose length its validation curve sets)."""
        return budget * self.cap_factor if getattr(self, arm).schedule == "plateau" else budget

    def validate(self, key: str) -> None:
        require(len(self.cnn_widths) >= 1 and min(self.cnn_widths) >= 1, f"{key}.cnn_widths",
                f"must list one positive channel count per stage, got {self.cnn_widths}")  # fmt: skip
        require(self.logreg_max_per_class >= 0, f"{key}.logreg_max_per_class", "must not be negative")
        require(self.points == list(range(len(self.points))) and len(self.points) >= 1, f"{key}.points",
                f"must be 0, 1, ..., n-1 (dvc.yaml's sweep items, one per size), got {self.points}")  # fmt: skip
        require(self.headline_point in self.points, f"{key}.headline_point",
                f"must be one of the points {self.points}, got {self.headline_point}")  # fmt: skip
        for name in ("offline_sizes", "paper_fractions"):
            values = getattr(self, name)
            require(len(values) == len(self.points), f"{key}.{name}",
                    f"must list one value per sweep point ({len(self.points)}), got {len(values)}")  # fmt: skip
            require(all(a < b for a, b in itertools.pairwise(values)), f"{key}.{name}",
                    f"must be strictly increasing (smaller sets are subsets of larger ones), got {values}")  # fmt: skip
        require(all(1 <= n <= 6000 for n in self.offline_sizes), f"{key}.offline_sizes",
                "must be images per class between 1 and 6000 (Fashion-MNIST has 6000 per class)")  # fmt: skip
        require(all(0 < f <= 1 for f in self.paper_fractions), f"{key}.paper_fractions", "must be in (0, 1]")
        for name in ("batch_size", "max_epochs", "min_steps", "scores", "patience", "cap_factor"):
            require(getattr(self, name) >= 1, f"{key}.{name}", f"must be at least 1, got {getattr(self, name)}")
        require(self.plateau_window >= 1 and 2 * self.plateau_window <= self.scores, f"{key}.plateau_window",
                f"must be at least 1 and at most half of data_hunger.scores ({self.scores}), got "
                f"{self.plateau_window}")  # fmt: skip
        require(self.choice_seeds >= 1, f"{key}.choice_seeds", f"must be at least 1, got {self.choice_seeds}")
        require(self.prune_z >= 0, f"{key}.prune_z", f"must be 0 (no pruning) or more, got {self.prune_z}")
        require(self.choice_keep >= 0, f"{key}.choice_keep",
                f"must be 0 (no limit) or a number of candidates, got {self.choice_keep}")  # fmt: skip
        require(self.monitor_per_class >= 0, f"{key}.monitor_per_class",
                f"must be 0 (the whole split) or images per class, got {self.monitor_per_class}")  # fmt: skip
        require(0 < self.cooldown_fraction <= 1, f"{key}.cooldown_fraction",
                f"must be in (0, 1], got {self.cooldown_fraction}")  # fmt: skip
        require(self.patience < self.scores, f"{key}.patience",
                f"must be below data_hunger.scores ({self.scores}), or no run could stop early")  # fmt: skip
        require(self.probe_regs == sorted(self.probe_regs), f"{key}.probe_regs",
                f"must be in increasing order (a choice at either end is flagged), got {self.probe_regs}")  # fmt: skip
        require(len(self.probe_regs) >= 1 and all(0 < r < math.inf for r in self.probe_regs), f"{key}.probe_regs",
                f"must list positive, finite ridge strengths, got {self.probe_regs}")  # fmt: skip
        pairs = [pair.split("-") for pair in self.primary_comparisons]
        require(bool(pairs) and all(len(p) == 2 and p[0] != p[1] and set(p) <= set(ARMS) for p in pairs),
                f"{key}.primary_comparisons", f"must name one or more comparisons '<arm>-<arm>' of the arms "
                f"{list(ARMS)}, got {self.primary_comparisons}")  # fmt: skip
        require(bool(self.primary_points) and all(p >= 0 for p in self.primary_points), f"{key}.primary_points",
                f"must be indices into the size lists (0 or more), got {self.primary_points}")  # fmt: skip
        for arm in TRAINED:
            getattr(self, arm).validate(f"{key}.{arm}")


# The trained arms' optimisers (pipeline.core.arm_registry.TRAINED), one field each after the shared ones, in the
# registry's
# order: registering a trained arm asks for its data_hunger section, and a missing one fails with its key's name.
DataHungerConfig = dataclasses.make_dataclass(
    "DataHungerConfig", [(arm, GridOptimiser) for arm in TRAINED], bases=(_DataHungerShared,), frozen=True,
    namespace={"__module__": __name__, "__doc__": "params.yaml's data_hunger: the shared values, then each trained "
               "arm's optimiser with its grid of learning rates."},
)  # fmt: skip


# The collapse, isolated: seed 000's recipe with only its weight decay changed
# (pipeline.core.arm_registry.DECAY_VARIANTS).
AblationVariant = Literal[tuple(DECAY_VARIANTS)]


@dataclass(frozen=True)
class AblationConfig:
    variants: list[AblationVariant]

    def validate(self, key: str) -> None:
        require(len(self.variants) >= 1, f"{key}.variants", "must list at least one variant")
        require(
            len(set(self.variants)) == len(self.variants), f"{key}.variants", f"must not repeat, got {self.variants}"
        )


@dataclass(frozen=True)
class Params:
    """Everything in params.yaml; every key is required (params.yaml is the one place values live)."""

    preset: Literal["offline", "paper"]
    seeds: list[int]
    runtime: RuntimeConfig
    offline: OfflineConfig
    paper: PaperConfig
    backbone: BackboneConfig
    train_scratch: TrainScratchConfig
    linear_probe: LinearProbeConfig
    evaluate: EvaluateConfig
    images: ImagesConfig
    validation: ValidationConfig
    data_hunger: DataHungerConfig
    ablation: AblationConfig
    pretraining_scale: PretrainingScaleConfig
    synthetic: SyntheticConfig
    masked_patch: MaskedPatchConfig

    def validate(self, key: str = "") -> None:
        require(len(self.seeds) >= 1, "seeds", "must list at least one seed")
        require(len(set(self.seeds)) == len(self.seeds), "seeds", "must not repeat a seed")
        # torch.Generator.manual_seed takes 0 <= seed < 2^64, numpy's 0 <= seed < 2^32: the narrower range holds
        for key, values in (("seeds", self.seeds), ("backbone.seed", [self.backbone.seed]),
                            ("masked_patch.seed", [self.masked_patch.seed]),
                            ("masked_patch.extra_seeds", self.masked_patch.extra_seeds)):  # fmt: skip
            require(all(0 <= seed < 2**32 for seed in values), key,
                    f"must be seeds from 0 to 4294967295 (numpy's range), got {values}")  # fmt: skip
        require(self.masked_patch.decision_shots in self.pretraining_scale.shots, "masked_patch.decision_shots",
                    f"must be one of pretraining_scale.shots {self.pretraining_scale.shots}, got "
               f"{self.masked_patch.decision_shots}")  # fmt: skip
        require(self.synthetic.primary_shots in self.pretraining_scale.shots, "synthetic.primary_shots",
                f"must be one of pretraining_scale.shots {self.pretraining_scale.shots}, got "
                f"{self.synthetic.primary_shots}")  # fmt: skip
        require(self.masked_patch.stretch_shots in self.pretraining_scale.shots, "masked_patch.stretch_shots",
                    f"must be one of pretraining_scale.shots {self.pretraining_scale.shots}, got "
               f"{self.masked_patch.stretch_shots}")  # fmt: skip
        require(not self.masked_patch.extra_seeds or self.backbone_source == "masked_patch",
                "masked_patch.extra_seeds", "pairs the curve's seeds with several masked-patch backbones, but the "
                f"transfer arms' backbone is {self.backbone_source}: set offline.backbone: masked_patch (offline "
                "preset) or masked_patch.extra_seeds: []")  # fmt: skip
        choice_seeds = self.data_hunger.choice_seeds
        require(choice_seeds <= len(self.seeds), "data_hunger.choice_seeds",
                f"must be at most the number of seeds ({len(self.seeds)}), got {choice_seeds}")  # fmt: skip
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if dataclasses.is_dataclass(value):
                value.validate(f.name)

    @property
    def model_name(self) -> str:
        """The architecture of both arms (offline) or of the from-scratch arm (paper)."""
        return self.offline.model if self.preset == "offline" else self.paper.model

    @property
    def backbone_source(self) -> str:
        """The transfer arms' backbone: offline.backbone, or (paper) torchvision's supervised ImageNet weights."""
        return self.offline.backbone if self.preset == "offline" else "supervised"

    @property
    def backbone_count(self) -> int:
        """The transfer arms' backbones on the curve: the masked-patch stage's and one per extra seed."""
        return 1 + len(self.masked_patch.extra_seeds) if self.backbone_source == "masked_patch" else 1

    @property
    def backbone_model_name(self) -> str:
        return self.offline.model if self.preset == "offline" else self.paper.backbone_model

    @property
    def scratch_recipe(self) -> ScratchRecipe:
        """The preset's from-scratch recipe: train_scratch.offline or train_scratch.paper."""
        return getattr(self.train_scratch, self.preset)

    @property
    def val_per_class(self) -> int:
        """Validation images per class of the preset."""
        return self.validation.offline_per_class if self.preset == "offline" else self.validation.paper_per_class

    @property
    def seed_arms_per_class(self) -> int | None:
        """Training images per class of seed 000's two arms: offline.train_per_class, or (paper) every one."""
        return self.offline.train_per_class if self.preset == "offline" else None

    @property
    def head_recipe(self) -> EpochRecipe:
        """The preset's linear-head recipe: linear_probe.offline or linear_probe.paper."""
        return getattr(self.linear_probe, self.preset)


# pipeline.models.vit.PRESETS' names (a test keeps them equal), listed here so that config imports no model code
MODEL_NAMES = ("B/16", "B/32", "L/16", "L/32", "H/14", "seed-small", "fmnist", "tiny")


def _check_model(name: str, key: str) -> None:
    require(name in MODEL_NAMES, key, f"is {name!r}, not a known model; choose one of {sorted(MODEL_NAMES)}")


URL_SCHEMES = ("https", "http", "file")


def url_problem(url: str) -> str | None:
    """Why ``url`` cannot be fetched, judged from its text alone (the one rule, also used by pipeline.data.fetch):
    an https, http or file scheme, a host for http(s), a path for file. ``None`` when it is well formed."""
    import urllib.parse

    parsed = urllib.parse.urlparse(url)
    if parsed.scheme not in URL_SCHEMES or "://" not in url:
        got = f"scheme {parsed.scheme!r}" if parsed.scheme else "no scheme"
        return f"it has {got}; only https, http, file are allowed (a local file is file:///absolute/path)"
    if parsed.scheme in ("http", "https") and not parsed.hostname:
        return "it has no host name"
    if parsed.scheme == "file" and not parsed.path:
        return "it has no path"
    return None


def _check_url(url: str, key: str) -> None:
    problem = url_problem(url)
    require(problem is None, key, f"must be an https, http or file URL, got {url!r}: {problem}")
