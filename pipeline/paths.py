"""Where every stage reads and writes, relative to the repository root (the DVC outs in dvc.yaml)."""

from pathlib import Path

RAW = Path("data/raw")
DOWNLOADS = Path("data/downloads")  # a cache of archives, outside DVC's outputs so reruns skip the network
PREPARED = Path("data/prepared")
MODELS = Path("models")
BACKBONE = MODELS / "backbone.pt"
SCRATCH_MODELS = MODELS / "scratch"
HEAD_MODELS = MODELS / "pretrained"
METRICS = Path("metrics")
PLOTS = Path("plots")
HISTORY = PLOTS / "history"
CONFUSION = PLOTS / "confusion"

ARMS = ("scratch", "pretrained")


def prepared_split(view: str, split: str) -> Path:
    """``view`` is the arm whose input transform the images follow; ``split`` is train or test."""
    return PREPARED / view / f"{split}.pt"


def scratch_model(seed: int) -> Path:
    return SCRATCH_MODELS / f"seed_{seed}.pt"


def head_model(seed: int) -> Path:
    return HEAD_MODELS / f"head_seed_{seed}.pt"
