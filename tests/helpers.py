"""Helpers shared by the unit tests: the committed params as a mapping, tiny models and fixed logits."""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import io
from pathlib import Path
from types import ModuleType

import numpy as np
import torch
import torch.nn.functional as F
import yaml
from torch import nn

from pipeline.core import files
from pipeline.data import images as data
from pipeline.data.images import ImageSet
from pipeline.models.vit import ViT, vit_config
from pipeline.train.runtime import Runtime
from pipeline.train.schedule import Recipe, epoch_steps

ROOT = Path(__file__).resolve().parents[1]
CPU = Runtime(torch.device("cpu"), "fp32")


def benchmark_module(name: str) -> ModuleType:
    """``benchmarks/<name>.py``, imported: the benchmarks are scripts, not a package."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def committed_params() -> dict:
    """params.yaml exactly as committed, as a plain mapping."""
    return yaml.safe_load((ROOT / "params.yaml").read_text())


def raw_params() -> dict:
    """The committed params.yaml as a plain mapping, to edit one value per test, with the project copies' one-seed
    choice and one backbone (project_copy.ONE_SEED_CHOICE): the tests' fixtures train fewer seeds and use the
    paper preset's or a supervised backbone."""
    from project_copy import ONE_SEED_CHOICE, merged

    return merged(committed_params(), ONE_SEED_CHOICE)


def params_with(**sections):
    """The committed params with ``sections`` merged in (a mapping merges key by key), parsed and validated."""
    from project_copy import merged

    from pipeline.core.params_yaml import parse_params

    return parse_params(merged(raw_params(), sections))


def with_value(data: dict, dotted: str, value) -> dict:
    data = copy.deepcopy(data)
    *sections, last = dotted.split(".")
    node = data
    for section in sections:
        node = node.setdefault(section, {})
    node[last] = value
    return data


class FixedLogits(nn.Module):
    """Returns its inputs as logits; the parameter gets a zero gradient, so Adam never moves anything.

    This makes every train/eval accuracy a known function of the data, whatever the batch order.
    """

    def __init__(self) -> None:
        super().__init__()
        self.unused = nn.Parameter(torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 0 * self.unused


def logits_correct_for(labels: torch.Tensor, correct: torch.Tensor, num_classes: int = 3) -> torch.Tensor:
    """Logits (N, K) whose argmax is the label where ``correct`` and another class elsewhere."""
    predicted = torch.where(correct, labels, (labels + 1) % num_classes)
    return F.one_hot(predicted, num_classes).float() * 2.0


def tiny_vit(seed: int = 0, num_classes: int = 3) -> ViT:
    torch.manual_seed(seed)
    model = ViT(vit_config("tiny", num_classes=num_classes))
    with torch.no_grad():  # the zero-initialised head would hide every difference in the logits
        nn.init.normal_(model.heads.head.weight, std=0.5)
    return model


PAYLOAD = b"vision transformer " * 1000


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tree(root: Path) -> set[str]:
    """Every file and folder under ``root``, relative, so a test can see exactly what was left behind."""
    return {str(p.relative_to(root)) for p in root.rglob("*")}


FP32_EPS = torch.finfo(torch.float32).eps


def assert_close_fp32(actual: torch.Tensor, expected: torch.Tensor, terms: int, slack: float = 8.0) -> None:
    """Equal up to fp32 rounding: ``slack * eps * sqrt(terms)`` times the largest magnitude compared.

    A sum of ``terms`` fp32 products comes out in another order on another CPU kind (AVX2 against
    AVX-512), so a fixed absolute tolerance that holds on one kind can miss on the other; the error of
    a reordered sum grows with its magnitude and, in expectation, with the square root of its length.
    A real bug (a wrong weight, a transposed patch) moves values by their own size, far above this.
    """
    scale = max(expected.abs().max().item(), actual.abs().max().item(), 1e-30)
    tolerance = slack * FP32_EPS * terms**0.5 * scale
    difference = (actual.double() - expected.double()).abs().max().item()
    assert difference <= tolerance, f"max |difference| {difference:.3e} exceeds {tolerance:.3e} (scale {scale:.3f})"


def png_claiming(width: int, height: int) -> bytes:
    """A few hundred bytes of greyscale PNG whose header claims ``width`` x ``height`` pixels.

    Its pixel data is a stub: only a reader that trusts the header and starts decoding gets further
    than the size check, so a refusal from the header alone is observable."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")
    )


class OpensMarker:
    """Unpickling this calls ``open(marker, "w")``, which creates the marker: proof that code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def grey_set(n: int, seed: int, size: int = 8) -> ImageSet:
    """``n`` random (non-constant) greyscale images with labels 0, 1, 2, 0, 1, ..."""
    images = torch.randint(0, 256, (n, 1, size, size), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))
    return ImageSet(images, torch.arange(n) % 3, ["a", "b", "c"], data.FASHION_MNIST_MEAN, data.FASHION_MNIST_STD)


def idx_bytes(array: np.ndarray) -> bytes:
    magic = {1: 0x00000801, 3: 0x00000803}[array.ndim]
    dims = b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    return magic.to_bytes(4, "big") + dims + array.astype(np.uint8).tobytes()


# The data-hunger sweep at the paper preset on the tiny model, two seeds: what its unit and stage tests run.
FRACTIONS = [0.17, 0.34, 0.5, 0.67, 1.0]  # of 6 images per class: 1, 2, 3, 4, 6


def tiny_params(**data_hunger_values):
    return params_with(
        **{
            "preset": "paper",
            "seeds": [0, 1],
            "paper": {"model": "tiny", "backbone_model": "tiny"},
            "data_hunger": {"paper_fractions": FRACTIONS, "max_epochs": 1, "min_steps": 6, "scores": 3,
                            "patience": 1, "plateau_window": 1,
                            "batch_size": 4, **data_hunger_values},
        }
    )  # fmt: skip


def digest_tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` (hidden ones too) with its sha256: equal digests mean nothing changed."""
    if root.is_file():
        return {root.name: files.file_sha256(root)}
    return {str(p.relative_to(root)): files.file_sha256(p) for p in sorted(root.rglob("*")) if p.is_file()}


def truncated_jpeg() -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.full((40, 40, 3), 128, dtype=np.uint8)).save(buffer, format="JPEG")
    return buffer.getvalue()[:300]


def recipe_for(n: int, epochs: int, lr: float, batch_size: int, **changes) -> Recipe:
    """Adam, constant lr, no decay or clipping, for ``epochs`` passes over ``n`` examples."""
    settings = dict(optimizer="adam", weight_decay=0.0, schedule="none", warmup_fraction=0.0, grad_clip=0.0)
    return Recipe(lr=lr, batch_size=batch_size, steps=epoch_steps(epochs, n, batch_size), **{**settings, **changes})


# download -> prepare -> sweep_cnn@0, sweep_cnn@1 -> plot, and summary alone (dvc dag --dot's form, edges downstream)
DOT = """strict digraph {
"download";
"prepare";
"sweep_cnn@0";
"sweep_cnn@1";
"plot";
"summary";
"download" -> "prepare";
"prepare" -> "sweep_cnn@0";
"prepare" -> "sweep_cnn@1";
"sweep_cnn@0" -> "plot";
"sweep_cnn@1" -> "plot";
}
"""
