"""Where every stage reads and writes, relative to the repository root (the DVC outs in dvc.yaml)."""

from pathlib import Path

RAW = Path("data/raw")
PAPER_FOLDER = Path("data/paper_folder")  # paper.folder's default: your images, or (while it has none) the zip
DOWNLOADS = Path("data/downloads")  # a cache of archives, outside DVC's outputs so reruns skip the network
PREPARED = Path("data/prepared")
MODELS = Path("models")
BACKBONE = MODELS / "backbone.pt"  # supervised: pretrained on the pool (offline) or torchvision's (paper)
MASKED_PATCH = MODELS / "masked_patch.pt"  # self-supervised: masked patch prediction (offline)
BACKBONES = {"supervised": BACKBONE, "masked_patch": MASKED_PATCH}  # offline.backbone's choices
# masked_patch.extra_seeds' backbones, the curve's seed i paired with backbone i mod k (0: MASKED_PATCH)
MASKED_PATCH_SEEDS = MODELS / "masked_patch_seeds"
SCRATCH_MODELS = MODELS / "scratch"
LINEAR_PROBES = MODELS / "linear_probe"
METRICS = Path("metrics")
PLOTS = Path("plots")
HISTORY = PLOTS / "history"
CONFUSION = PLOTS / "confusion"
# issue 38's opt-in study (studies/synthetic/dvc.yaml): the rendered images, its backbones, its metrics' folder
SYNTHETIC = Path("data/synthetic")
SYNTHETIC_MODELS = MODELS / "synthetic"
SYNTHETIC_METRICS = METRICS / "synthetic"

# The prepared inputs: ``scratch`` for a model trained from random initialisation, ``pretrained`` through the
# backbone's own transform (the paper preset's ImageNet resize and crop; offline, the same images).
VIEWS = ("scratch", "pretrained")
# The headline's two arms (train_scratch and linear_probe, scored by evaluate) and the view each reads.
HEADLINE_VIEWS = {"scratch": "scratch", "linear": "pretrained"}


def prepared_split(view: str, split: str) -> Path:
    """``view`` is one of :data:`VIEWS`; ``split`` is train (paper preset), val or test."""
    return PREPARED / view / f"{split}.pt"


def masked_patch_seed(index: int) -> Path:
    """The masked-patch backbone of ``masked_patch.extra_seeds[index - 1]`` (index 0 is :data:`MASKED_PATCH`)."""
    return MASKED_PATCH_SEEDS / f"backbone_{index}.pt"


def scratch_model(seed: int) -> Path:
    return SCRATCH_MODELS / f"seed_{seed}.pt"


def linear_probe(seed: int) -> Path:
    return LINEAR_PROBES / f"head_seed_{seed}.pt"
