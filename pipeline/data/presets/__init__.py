"""The dataset presets behind one interface: :func:`get` returns a :class:`Preset`, what a preset provides (how
to obtain its raw data, how to prepare it, and what the pipeline may do with it); one module per preset holds its
code and its ``PRESET``.

- ``offline`` (:mod:`~pipeline.data.presets.fashion_mnist`): Fashion-MNIST from Debian's package, three target
  classes and seven held-out pool classes the pipeline pretrains its backbone on;
- ``paper`` (:mod:`~pipeline.data.presets.image_folder`): seed 000's pizza/steak/sushi ImageFolder (a pinned
  zip or your own folder), with torchvision's ImageNet ViT-B/16 weights as the backbone.

A new preset means its module (a ``PRESET``), its params section (pipeline/core/config.py: a dataclass, a field
of ``Params`` named like the preset, and the name in ``Params.preset``'s choices) and its entry in
:data:`PRESETS`. Outside this package and config, code asks a preset's attributes, never its name.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# preset name -> its module; imported on demand so that a stage loads only its own preset's code
PRESETS = {"offline": "pipeline.data.presets.fashion_mnist", "paper": "pipeline.data.presets.image_folder"}


@dataclass(frozen=True)
class Preset:
    """What one dataset preset provides; its params section is the ``Params`` field named ``name``."""

    name: str  # params.yaml's ``preset`` and the name of its section
    # (section, data/raw, data/downloads) -> its raw data's folder, verified and whole
    obtain: Callable[..., Path]
    # (section, raw folder, out folder, {view: (image size, channels)}, validation per class, max pixels) -> the
    # classes, pool classes, counts and manifest rows of data/prepared
    prepare: Callable[..., dict]
    # (section) -> {view: model name}: the model each view's images are prepared for
    view_models: Callable[..., dict[str, str]]
    # (view) -> the prepared file every arm draws its training subsets from
    training_file: Callable[[str], Path]
    has_pool: bool  # held-out classes: the backbone is pretrained here and the pretraining-size axis runs
    sizes_are_counts: bool  # data_hunger's sizes: images per class (offline_sizes), else fractions of the largest
    pretrained_view_crops: bool  # the pretrained view resizes and centre-crops as torchvision's weights expect


def get(name: str) -> Preset:
    """The preset named ``name`` (params.yaml's ``preset``, already checked by pipeline.core.config)."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
    return importlib.import_module(PRESETS[name]).PRESET
