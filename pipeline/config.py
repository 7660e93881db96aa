"""``params.yaml`` parsed once into frozen dataclasses that reject unknown keys and bad values."""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from pipeline.errors import UserError

PARAMS_FILE = Path("params.yaml")
FASHION_MNIST_CLASSES = (
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
)  # fmt: skip


class ConfigError(UserError):
    """A value in params.yaml is missing, unknown, mistyped or out of range."""


def _check(condition: bool, key: str, message: str) -> None:
    if not condition:
        raise ConfigError(f"params.yaml: {key} {message}")


@dataclass(frozen=True)
class RuntimeConfig:
    device: str = "auto"
    precision: str = "auto"
    threads: int = 2

    def validate(self, key: str) -> None:
        _check(self.device in ("auto", "cpu", "cuda", "mps"), f"{key}.device", "must be one of auto, cpu, cuda, mps")
        _check(self.precision in ("auto", "bf16", "fp32"), f"{key}.precision", "must be one of auto, bf16, fp32")
        _check(self.threads >= 1, f"{key}.threads", "must be at least 1")


@dataclass(frozen=True)
class OfflineConfig:
    debian_dir: str = "/usr/share/datasets/fashion-mnist"
    mirror: bool = True
    classes: list[str] = field(default_factory=lambda: ["Pullover", "Coat", "Shirt"])
    train_per_class: int = 75
    model: str = "fmnist"

    def validate(self, key: str) -> None:
        unknown = [c for c in self.classes if c not in FASHION_MNIST_CLASSES]
        _check(
            not unknown, f"{key}.classes", f"has unknown class(es) {unknown}; choose from {list(FASHION_MNIST_CLASSES)}"
        )
        _check(
            len(set(self.classes)) == len(self.classes),
            f"{key}.classes",
            f"must not repeat a class, got {self.classes}",
        )
        _check(len(self.classes) >= 2, f"{key}.classes", "needs at least two different classes")
        _check(
            len(set(self.classes)) < 10, f"{key}.classes", "must leave at least one class to pretrain the backbone on"
        )
        _check(1 <= self.train_per_class <= 6000, f"{key}.train_per_class", "must be between 1 and 6000")
        _check_model(self.model, f"{key}.model")


@dataclass(frozen=True)
class PaperConfig:
    url: str = "https://github.com/mrdbourke/pytorch-deep-learning/raw/main/data/pizza_steak_sushi.zip"
    sha256: str = "5e9596fcc939a32996e59bbed8ec690ae39203bbcbc08292a92d44e4c4a27652"
    folder: str = ""
    max_extract_mb: int = 1024
    model: str = "B/16"
    backbone_model: str = "B/16"
    weights_url: str = "https://download.pytorch.org/models/vit_b_16-c867db91.pth"
    weights_sha256: str = "c867db91"

    def validate(self, key: str) -> None:
        _check_url(self.url, f"{key}.url")
        _check_url(self.weights_url, f"{key}.weights_url")
        _check(
            re.fullmatch(r"[0-9a-f]{64}", self.sha256) is not None, f"{key}.sha256", "must be 64 lowercase hex digits"
        )
        _check(re.fullmatch(r"[0-9a-f]{8,64}", self.weights_sha256) is not None, f"{key}.weights_sha256",
               "must be 8 to 64 lowercase hex digits (a sha256 or its prefix)")  # fmt: skip
        _check(self.max_extract_mb > 0, f"{key}.max_extract_mb", "must be positive")
        _check_model(self.model, f"{key}.model")
        _check_model(self.backbone_model, f"{key}.backbone_model")


@dataclass(frozen=True)
class BackboneConfig:
    epochs: int = 4
    batch_size: int = 256
    lr: float = 0.002
    weight_decay: float = 0.05
    warmup_fraction: float = 0.1
    grad_clip: float = 1.0
    augment: bool = True
    seed: int = 0

    def validate(self, key: str) -> None:
        _check_recipe(self, key)


@dataclass(frozen=True)
class ScratchRecipe:
    """One preset's from-scratch recipe (seed 000's: Adam, lr 3e-3, weight decay 0.3, batch 32)."""

    optimizer: str = "adam"
    lr: float = 0.003
    weight_decay: float = 0.3
    batch_size: int = 32
    epochs: int = 5
    warmup_fraction: float = 0.0
    schedule: str = "none"
    grad_clip: float = 0.0
    augment: bool = False
    dropout: float = 0.1  # after the position embeddings and after each dense layer of the MLP (Table 3)

    def validate(self, key: str) -> None:
        _check_recipe(self, key)
        _check(self.optimizer in ("adam", "adamw"), f"{key}.optimizer", "must be one of adam, adamw")
        _check(self.schedule in ("none", "cosine"), f"{key}.schedule", "must be one of none, cosine")
        _check(0 <= self.dropout < 1, f"{key}.dropout", f"must be in [0, 1), got {self.dropout}")


class _PerPreset:
    """A section with one subsection per preset (``offline``, ``paper``), each validated under its own key."""

    def validate(self, key: str) -> None:
        for preset in ("offline", "paper"):
            getattr(self, preset).validate(f"{key}.{preset}")


@dataclass(frozen=True)
class TrainScratchConfig(_PerPreset):
    offline: ScratchRecipe = field(default_factory=ScratchRecipe)
    paper: ScratchRecipe = field(default_factory=ScratchRecipe)


@dataclass(frozen=True)
class HeadRecipe:
    """One preset's linear-head recipe (seed 000's: Adam, lr 1e-3, batch 32, 10 epochs)."""

    lr: float = 0.001
    batch_size: int = 32
    epochs: int = 10

    def validate(self, key: str) -> None:
        _check_recipe(self, key)


@dataclass(frozen=True)
class FinetuneHeadConfig(_PerPreset):
    offline: HeadRecipe = field(default_factory=HeadRecipe)
    paper: HeadRecipe = field(default_factory=HeadRecipe)


@dataclass(frozen=True)
class ImagesConfig:
    # PIL's own decompression-bomb limit (Image.MAX_IMAGE_PIXELS): a larger image is refused before decoding.
    max_pixels: int = 89_478_485

    def validate(self, key: str) -> None:
        _check(self.max_pixels >= 1, f"{key}.max_pixels", f"must be at least 1, got {self.max_pixels}")


@dataclass(frozen=True)
class EvaluateConfig:
    batch_size: int = 256

    def validate(self, key: str) -> None:
        _check(self.batch_size >= 1, f"{key}.batch_size", "must be at least 1")


@dataclass(frozen=True)
class DataHungerConfig:
    points: list[int] = field(default_factory=lambda: [0, 1, 2, 3, 4, 5])
    offline_sizes: list[int] = field(default_factory=lambda: [10, 25, 75, 250, 1000, 6000])
    paper_fractions: list[float] = field(default_factory=lambda: [0.1, 0.2, 0.3, 0.5, 0.75, 1.0])
    steps: int = 150
    batch_size: int = 64
    scratch_lr: float = 0.001
    finetune_lr: float = 0.0001
    linear_lr: float = 0.001
    weight_decay: float = 0.05
    warmup_fraction: float = 0.1
    grad_clip: float = 1.0
    logreg_max_per_class: int = 250
    cnn_widths: list[int] = field(default_factory=lambda: [32, 64, 128, 256])

    def validate(self, key: str) -> None:
        _check(len(self.cnn_widths) >= 1 and min(self.cnn_widths) >= 1, f"{key}.cnn_widths",
               f"must list one positive channel count per stage, got {self.cnn_widths}")  # fmt: skip
        _check(self.logreg_max_per_class >= 0, f"{key}.logreg_max_per_class", "must not be negative")
        _check(self.points == list(range(len(self.points))) and len(self.points) >= 1, f"{key}.points",
               f"must be 0, 1, ..., n-1 (dvc.yaml's sweep items, one per size), got {self.points}")  # fmt: skip
        for name in ("offline_sizes", "paper_fractions"):
            values = getattr(self, name)
            _check(len(values) == len(self.points), f"{key}.{name}",
                   f"must list one value per sweep point ({len(self.points)}), got {len(values)}")  # fmt: skip
            _check(all(a < b for a, b in itertools.pairwise(values)), f"{key}.{name}",
                   f"must be strictly increasing (smaller sets are subsets of larger ones), got {values}")  # fmt: skip
        _check(all(1 <= n <= 6000 for n in self.offline_sizes), f"{key}.offline_sizes",
               "must be images per class between 1 and 6000 (Fashion-MNIST has 6000 per class)")  # fmt: skip
        _check(all(0 < f <= 1 for f in self.paper_fractions), f"{key}.paper_fractions", "must be in (0, 1]")
        _check(self.steps >= 1, f"{key}.steps", f"must be at least 1, got {self.steps}")
        _check(self.batch_size >= 1, f"{key}.batch_size", f"must be at least 1, got {self.batch_size}")
        for name in ("scratch_lr", "finetune_lr", "linear_lr"):
            _check(0 < getattr(self, name) < math.inf, f"{key}.{name}", "must be positive and finite")
        for name in ("weight_decay", "grad_clip"):
            _check(0 <= getattr(self, name) < math.inf, f"{key}.{name}", "must not be negative, and finite")
        _check(0 <= self.warmup_fraction < 1, f"{key}.warmup_fraction", "must be in [0, 1)")


ABLATION_RECIPES = ("seed", "paper")
ABLATION_OPTIONS = ("aug", "mean")


@dataclass(frozen=True)
class AblationConfig:
    # A variant is a recipe, "seed" (train_scratch's optimiser) or "paper" (data_hunger's scratch recipe),
    # plus options: "+aug" (random crop and flip), "+mean" (mean-pooled patch tokens instead of the class token).
    variants: list[str] = field(default_factory=lambda: ["seed", "paper", "paper+aug", "paper+aug+mean"])

    def validate(self, key: str) -> None:
        _check(len(self.variants) >= 1, f"{key}.variants", "must list at least one variant")
        _check(
            len(set(self.variants)) == len(self.variants), f"{key}.variants", f"must not repeat, got {self.variants}"
        )
        for variant in self.variants:
            recipe, *options = variant.split("+")
            _check(
                recipe in ABLATION_RECIPES
                and set(options) <= set(ABLATION_OPTIONS)
                and len(set(options)) == len(options),
                f"{key}.variants",
                f"has {variant!r}; a variant is {' or '.join(ABLATION_RECIPES)} followed by any of "
                f"{', '.join('+' + o for o in ABLATION_OPTIONS)}, e.g. paper+aug+mean",
            )


@dataclass(frozen=True)
class Params:
    """Everything in params.yaml."""

    preset: str = "offline"
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    offline: OfflineConfig = field(default_factory=OfflineConfig)
    paper: PaperConfig = field(default_factory=PaperConfig)
    backbone: BackboneConfig = field(default_factory=BackboneConfig)
    train_scratch: TrainScratchConfig = field(default_factory=TrainScratchConfig)
    finetune_head: FinetuneHeadConfig = field(default_factory=FinetuneHeadConfig)
    evaluate: EvaluateConfig = field(default_factory=EvaluateConfig)
    images: ImagesConfig = field(default_factory=ImagesConfig)
    data_hunger: DataHungerConfig = field(default_factory=DataHungerConfig)
    ablation: AblationConfig = field(default_factory=AblationConfig)

    def validate(self, key: str = "") -> None:
        _check(self.preset in ("offline", "paper"), "preset", f"must be one of offline, paper, got {self.preset!r}")
        _check(len(self.seeds) >= 1, "seeds", "must list at least one seed")
        _check(len(set(self.seeds)) == len(self.seeds), "seeds", "must not repeat a seed")
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if dataclasses.is_dataclass(value):
                value.validate(f.name)

    @property
    def model_name(self) -> str:
        """The architecture of both arms (offline) or of the from-scratch arm (paper)."""
        return self.offline.model if self.preset == "offline" else self.paper.model

    @property
    def backbone_model_name(self) -> str:
        return self.offline.model if self.preset == "offline" else self.paper.backbone_model

    @property
    def scratch_recipe(self) -> ScratchRecipe:
        """The preset's from-scratch recipe: train_scratch.offline or train_scratch.paper."""
        return getattr(self.train_scratch, self.preset)

    @property
    def head_recipe(self) -> HeadRecipe:
        """The preset's linear-head recipe: finetune_head.offline or finetune_head.paper."""
        return getattr(self.finetune_head, self.preset)


# pipeline.model.PRESETS' names (a test keeps them equal), listed here so that config imports no model code
MODEL_NAMES = ("B/16", "B/32", "L/16", "L/32", "H/14", "seed-small", "fmnist", "tiny")


def _check_model(name: str, key: str) -> None:
    _check(name in MODEL_NAMES, key, f"is {name!r}, not a known model; choose one of {sorted(MODEL_NAMES)}")


URL_SCHEMES = ("https", "http", "file")


def url_problem(url: str) -> str | None:
    """Why ``url`` cannot be fetched, judged from its text alone (the one rule, also used by pipeline.fetch):
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
    _check(problem is None, key, f"must be an https, http or file URL, got {url!r}: {problem}")


def _check_recipe(section, key: str) -> None:
    _check(0 < section.lr < math.inf, f"{key}.lr", f"must be positive and finite, got {section.lr}")
    _check(section.batch_size >= 1, f"{key}.batch_size", f"must be at least 1, got {section.batch_size}")
    _check(section.epochs >= 1, f"{key}.epochs", f"must be at least 1, got {section.epochs}")
    for name in ("weight_decay", "grad_clip"):
        if hasattr(section, name):
            _check(0 <= getattr(section, name) < math.inf, f"{key}.{name}", "must not be negative, and finite")
    if hasattr(section, "warmup_fraction"):
        _check(0 <= section.warmup_fraction < 1, f"{key}.warmup_fraction", "must be in [0, 1)")


def _coerce(value, annotation, key: str):
    """Checks ``value`` against a field's type; ints are accepted where floats are expected."""
    origin = typing.get_origin(annotation)
    if dataclasses.is_dataclass(annotation):
        return _build(annotation, value, key)
    if origin is list:
        _check(isinstance(value, list), key, f"must be a list, got {value!r}")
        (item_type,) = typing.get_args(annotation)
        return [_coerce(item, item_type, f"{key}[{i}]") for i, item in enumerate(value)]
    if annotation is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        _check(ok, key, f"must be a number, got {value!r}")
        return float(value)
    if annotation is int:
        _check(isinstance(value, int) and not isinstance(value, bool), key, f"must be an integer, got {value!r}")
        return value
    if annotation is bool:
        _check(isinstance(value, bool), key, f"must be true or false, got {value!r}")
        return value
    if annotation is str:
        _check(isinstance(value, str), key, f"must be a string, got {value!r}")
        return value
    raise TypeError(f"unsupported field type {annotation} for {key}")  # a bug in this module, not a user error


def _build(cls, data, key: str):
    where = key or "the top level"
    _check(isinstance(data, dict), where, f"must be a mapping of keys to values, got {data!r}")
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known, key=str)  # YAML reads bare on/off/yes/no keys as booleans
    if unknown:
        prefix = f"{key}." if key else ""
        raise ConfigError(
            f"params.yaml: unknown key(s) {[prefix + str(k) for k in unknown]} in {where}; "
            f"allowed keys are {sorted(known)}"
        )
    values = {}
    for name, value in data.items():
        annotation = hints[name]
        if isinstance(annotation, types.UnionType):  # pragma: no cover - no optional fields yet
            annotation = typing.get_args(annotation)[0]
        values[name] = _coerce(value, annotation, f"{key}.{name}" if key else name)
    return cls(**values)


def parse_params(data: dict) -> Params:
    """Builds and validates :class:`Params` from a parsed YAML mapping; missing keys take defaults."""
    params = _build(Params, data, "")
    params.validate()
    return params


def load_params(path: str | Path = PARAMS_FILE) -> Params:
    """Reads and validates ``params.yaml``.

    Raises:
        ConfigError: the file is missing, is not valid YAML, or has a bad key or value.
    """
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(
            f"{path} not found; run the stage from the repository root, where params.yaml lives"
        ) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        detail = " ".join(str(error).split())  # one line: YAML's own message spans several
        raise ConfigError(f"{path} is not valid YAML ({detail}); fix the syntax at the line shown") from None
    return parse_params(data if data is not None else {})


def flatten(params: Params) -> dict[str, str]:
    """All params as ``{"section.key": value}`` strings, for MLflow."""
    flat: dict[str, str] = {}

    def walk(prefix: str, value) -> None:
        if dataclasses.is_dataclass(value):
            for f in dataclasses.fields(value):
                walk(f"{prefix}.{f.name}" if prefix else f.name, getattr(value, f.name))
        else:
            flat[prefix] = str(value)

    walk("", params)
    return flat
