"""Class probabilities for your own images from a trained model in ``models/``.

    python -m pipeline.tools.predict photo.jpg other.png [--model scratch|linear] [--seed S] [--invert]
    vit-predict photo.jpg ...     # the same, as the console script

Each image gets its arm's input transform (paper preset: the scratch arm squashes to the model size,
the linear arm (frozen backbone + linear probe) resizes and centre-crops like torchvision's weights;
offline preset: both arms squash to the model size, in greyscale when the model takes one channel) and
the mean/std stored with the arm's prepared data. Prints one line per image, classes sorted by probability.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from pipeline.core import paths
from pipeline.core.entry import stage_main
from pipeline.core.errors import UserError
from pipeline.core.params_yaml import load_params
from pipeline.data.images import decode_image, normalise
from pipeline.models.vit import ViT
from pipeline.train.checkpoints import CARD_FOLDERS, card_files, load_from_card, read_model_card
from pipeline.train.runtime import Runtime, resolve_runtime

INVERT_HELP = (
    "invert grey levels (255 - value) before the model sees them. Fashion-MNIST garments are light on a "
    "black background, so a photo of a garment on a light background looks inverted to the offline "
    "preset's models; pass --invert for such photos"
)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.tools.predict",
        description="Class probabilities for your own images (JPEG, PNG, ... of any size, grey or colour) "
        "from a model trained by `dvc repro` (also the console script vit-predict).",
        epilog="Offline preset (Fashion-MNIST): the models saw white garments on a black background; "
        "use --invert for ordinary photos of a garment on a light background.",
    )
    parser.add_argument("images", nargs="+", type=Path, help="image files")
    parser.add_argument(
        "--model", choices=list(paths.HEADLINE_VIEWS), default="linear", help="which arm (default: linear)"
    )
    parser.add_argument("--seed", type=int, default=None, help="which seed's model (default: the first in params)")
    parser.add_argument("--invert", action="store_true", help=INVERT_HELP)
    return parser.parse_args(argv)


BATCH_SIZE = 64  # images decoded and run through the model at once


def load_model(card: dict, arm: str, seed: int, runtime: Runtime) -> ViT:
    """The trained model of ``arm`` and ``seed``, built from its card's architecture, in eval mode.

    Raises:
        UserError: the model file is missing (run `dvc repro` or `dvc pull`) or does not fit.
    """
    for path in card_files(card, arm, seed):
        if not path.is_file():
            raise UserError(
                f"{path} is missing: no trained {arm} model for seed {seed}. Run `dvc repro` to train it "
                "(or `dvc pull` to fetch the team's), or pick a trained seed with --seed"
            )
    return load_from_card(card, arm, seed, runtime)


def load_image(path: Path, size: int, mode: str, channels: int, invert: bool, max_pixels: int) -> torch.Tensor:
    """One image file -> uint8 (C, size, size) in the arm's transform, inverted if asked.

    Raises:
        UserError: the file is missing, or :func:`~pipeline.data.images.decode_image` refuses it (its one line says
            why).
    """
    if not path.is_file():
        raise UserError(f"{path} does not exist or is not a file")
    image = decode_image(path, size, mode, channels, max_pixels)
    return 255 - image if invert else image


@torch.inference_mode()
def predict(model: ViT, card: dict, images: torch.Tensor, runtime: Runtime) -> torch.Tensor:
    """uint8 (B, C, H, W) -> class probabilities (B, K), float32, normalised with the card's mean and std."""
    inputs = normalise(images, card["mean"], card["std"]).to(runtime.device)
    with runtime.autocast():
        logits = model(inputs)
    return torch.softmax(logits.float(), dim=-1).cpu()


def format_line(path: Path, probabilities: torch.Tensor, classes: list[str]) -> str:
    order = torch.argsort(probabilities, descending=True, stable=True)
    return f"{path}: " + "  ".join(f"{classes[int(k)]} {probabilities[k]:.3f}" for k in order)


@stage_main
def main() -> None:
    args = parse_args(sys.argv[1:])
    missing = [str(p) for p in args.images if not p.is_file()]
    if missing:  # before the model loads or a line is printed
        raise UserError(f"{', '.join(missing)}: no such file; give paths to image files")
    params = load_params()
    arm = args.model
    card = read_model_card(CARD_FOLDERS[arm])  # architecture, classes, mean/std and transform of the arm's models
    seed = card["seeds"][0] if args.seed is None else args.seed
    runtime = resolve_runtime(params.runtime)
    model = load_model(card, arm, seed, runtime)
    config, max_pixels = model.config, params.images.max_pixels
    for start in range(0, len(args.images), BATCH_SIZE):  # decoded a batch at a time: memory bounded by the batch
        batch_paths = args.images[start : start + BATCH_SIZE]
        images = torch.stack(
            [load_image(p, config.image_size, card["transform"], config.in_channels, args.invert, max_pixels)
             for p in batch_paths]
        )  # fmt: skip
        for path, probabilities in zip(batch_paths, predict(model, card, images, runtime), strict=True):
            print(format_line(path, probabilities, card["classes"]), flush=True)


if __name__ == "__main__":
    main()
