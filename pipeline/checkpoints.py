"""Model cards: what a stage's checkpoints need in order to be used without the pipeline that made them.

A card (``model.json`` beside the checkpoints) holds the architecture (the ViT preset's name and every
``ViTConfig`` field), the class names, the normalisation and the input transform; `predict` reads it, so a
teammate who pulled only ``models/`` can classify images. Plain JSON: readable without torch or pickle.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from pipeline.errors import UserError

MODEL_CARD = "model.json"  # beside a stage's checkpoints: what a model needs to be used without the pipeline


def model_card(arm: str, model_name: str, config, image_set, transform: str, seeds: list[int]) -> dict:
    """The architecture (preset name and ``ViTConfig`` fields), class names, normalisation and input transform
    of ``arm``'s checkpoints, so that `predict` needs neither params.yaml's model names nor the prepared data."""
    return {
        "arm": arm,
        "model_name": model_name,
        "model": dataclasses.asdict(config),
        "classes": list(image_set.classes),
        "mean": list(image_set.mean),
        "std": list(image_set.std),
        "transform": transform,
        "seeds": list(seeds),
    }


def read_model_card(folder: Path) -> dict:
    """The model card a training stage wrote beside its checkpoints.

    Raises:
        UserError: it is missing or unreadable (the stage has not run, or ran before cards existed).
    """
    path = Path(folder) / MODEL_CARD
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise UserError(
            f"{path} is missing or unreadable ({type(error).__name__}); run `dvc repro` (or `dvc pull`) to get "
            "the trained models with their card"
        ) from None
