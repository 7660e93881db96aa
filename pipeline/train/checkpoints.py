"""Every model the pipeline saves and loads, and their model cards, in one place.

The checkpoints are state dicts (``torch.save`` through an atomic rename, read back with ``weights_only``):
``models/backbone.pt`` and ``models/masked_patch.pt`` (the pretrained backbones), ``models/scratch/seed_<s>.pt``
(the from-scratch ViT) and ``models/linear_probe/head_seed_<s>.pt`` (a linear head, under the names it has
inside the ViT). Each is checked when read: a file that is no state dict, lacks the model's keys or does not fit
it fails in one line that names the file and the stage to rerun.

A card (``model.json`` beside the checkpoints) holds the architecture (the ViT preset's name and every
``ViTConfig`` field), the class names, the normalisation and the input transform; `predict` reads it, so a
teammate who pulled only ``models/`` can classify images. Plain JSON: readable without torch or pickle.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import torch
from torch import nn

from pipeline.core import paths
from pipeline.core.errors import UserError
from pipeline.core.files import load_tensors, read_json, save_tensors, write_json
from pipeline.models.vit import PRESETS, ViT, state_dict_mismatch, vit_config
from pipeline.train.runtime import Runtime

MODEL_CARD = "model.json"  # beside a stage's checkpoints: what a model needs to be used without the pipeline
CARD_FOLDERS = {"scratch": paths.SCRATCH_MODELS, "linear": paths.LINEAR_PROBES}  # where each arm's card lies
CARD_STAGES = {"scratch": "train_scratch", "linear": "linear_probe"}  # the dvc.yaml stage that writes each
BACKBONE_STAGES = {"supervised": "backbone", "masked_patch": "masked_patch"}  # offline.backbone's stages
HEAD_KEYS = ("heads.head.weight", "heads.head.bias")


def rerun(stage: str) -> str:
    return f"rerun `dvc repro -f {stage}`"


# --- saving ----------------------------------------------------------------------------------------------------


def save_state(path: Path, state: dict[str, torch.Tensor]) -> None:
    """A state dict at ``path``, atomically (a backbone's, or ``{}`` where the preset skips the stage)."""
    save_tensors(path, state)


def save_scratch(folder: Path, seed: int, model: nn.Module) -> None:
    """One seed's from-scratch ViT in ``folder`` (the train_scratch stage's temporary models folder)."""
    save_state(folder / paths.scratch_model(seed).name, {k: v.cpu() for k, v in model.state_dict().items()})


def head_state(head: nn.Linear) -> dict[str, torch.Tensor]:
    """The head's weights under the names they have inside the ViT."""
    return {"heads.head.weight": head.weight.detach().cpu(), "heads.head.bias": head.bias.detach().cpu()}


def save_head(folder: Path, seed: int, head: nn.Linear) -> None:
    """One seed's linear head in ``folder`` (the linear_probe stage's temporary models folder)."""
    save_state(folder / paths.linear_probe(seed).name, head_state(head))


# --- loading ---------------------------------------------------------------------------------------------------


def load_state(path: Path, stage: str, keys: tuple[str, ...] = ()) -> dict[str, torch.Tensor]:
    """The state dict in ``path``, checked to be a mapping of names to tensors holding ``keys``.

    Raises:
        UserError: the file is missing or unreadable, holds something else (a bare tensor, a list), or lacks
            ``keys``; the message names ``stage``, which writes it.
    """
    state = load_tensors(path)
    if not isinstance(state, dict) or not all(isinstance(k, str) and torch.is_tensor(v) for k, v in state.items()):
        held = type(state).__name__ if not isinstance(state, dict) else "a mapping with non-tensor values"
        raise UserError(f"{path} is not a state dict of parameter names to tensors (it holds {held}); "
                        f"{rerun(stage)}")  # fmt: skip
    missing = [k for k in keys if k not in state]
    if missing:
        raise UserError(f"{path} lacks {missing} (it holds {sorted(state)[:3]}...); {rerun(stage)}")
    return state


def fit(model: nn.Module, state: dict[str, torch.Tensor], path: Path, stage: str, what: str) -> nn.Module:
    """``model`` with ``state`` (read from ``path``) loaded ``strict``; ``what`` names the model in the error."""
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError:
        raise UserError(f"{path} does not fit {what} ({state_dict_mismatch(model, state)}); {rerun(stage)}") from None
    return model


def load_backbone(model_name: str, runtime: Runtime, source: str, index: int = 0) -> ViT:
    """Our ViT of preset ``model_name`` with a pretrained backbone's weights, frozen and in eval mode:
    ``source`` supervised (``models/backbone.pt``) or masked_patch (``models/masked_patch.pt``, whose features
    are its mean patch token, the representation that objective trains; ``index`` > 0: the masked_patch_seeds
    stage's backbone of ``masked_patch.extra_seeds[index - 1]``)."""
    path, stage = paths.BACKBONES[source], BACKBONE_STAGES[source]
    if index:
        path, stage = paths.masked_patch_seed(index), "masked_patch_seeds"
    state = load_state(path, stage)
    if not state:
        raise UserError(f"{path} holds no weights (its stage ran for the paper preset); set offline.backbone: "
                        "supervised, or run the offline preset")  # fmt: skip
    if HEAD_KEYS[0] not in state:
        raise UserError(f"{path} lacks {HEAD_KEYS[0]!r} (it holds {sorted(state)[:3]}...); {rerun(stage)}")
    pool = "mean" if source == "masked_patch" else "cls"
    backbone = ViT(vit_config(model_name, num_classes=state["heads.head.weight"].shape[0], pool=pool))
    fit(backbone, state, path, stage, f"model {model_name!r}")
    backbone.requires_grad_(False)
    return backbone.to(runtime.device).eval()


def load_torchvision_weights(path: Path, model_name: str, url: str) -> ViT:
    """torchvision's weights in ``path`` (downloaded from ``url``) loaded into our ViT of preset ``model_name``
    with ``strict=True`` (torchvision's legacy MLP names load too: model.MLPBlock)."""
    state = load_tensors(path)
    check = "check that paper.weights_url and paper.backbone_model name the same architecture"
    if not isinstance(state, dict):
        raise UserError(f"the weights at {url} are not a state dict (they hold {type(state).__name__}); {check}")
    head = state.get("heads.head.weight")
    model = ViT(vit_config(model_name, num_classes=head.shape[0] if head is not None else 1000))
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError:
        raise UserError(f"the weights at {url} do not fit paper.backbone_model {model_name!r} "
                        f"({state_dict_mismatch(model, state)}); {check}") from None  # fmt: skip
    return model


def load_scratch(model_name: str, num_classes: int, seed: int, runtime: Runtime) -> ViT:
    """The from-scratch ViT (preset ``model_name``) of one seed, in eval mode."""
    model = ViT(vit_config(model_name, num_classes=num_classes))
    load_scratch_weights(model, model_name, seed)
    return model.to(runtime.device).eval()


def load_scratch_weights(model: ViT, model_name: str, seed: int) -> ViT:
    """One seed's from-scratch weights loaded into ``model``, a ViT of preset ``model_name`` (reused across
    seeds)."""
    path = paths.scratch_model(seed)
    what = f"model {model_name!r} with {model.config.num_classes} classes"
    return fit(model, load_state(path, "train_scratch"), path, "train_scratch", what)


def load_head(seed: int, hidden_dim: int, num_classes: int) -> nn.Linear:
    """One seed's trained linear head (the linear_probe stage's)."""
    path = paths.linear_probe(seed)
    state = load_state(path, "linear_probe", HEAD_KEYS)
    head = nn.Linear(hidden_dim, num_classes)
    try:
        head.load_state_dict({"weight": state["heads.head.weight"], "bias": state["heads.head.bias"]})
    except RuntimeError as error:
        raise UserError(
            f"{path} does not fit a {hidden_dim}-wide backbone with {num_classes} classes "
            f"({type(error).__name__}: {str(error).splitlines()[0][:200]}); {rerun('linear_probe')}"
        ) from None
    return head


def with_head(backbone: ViT, head: nn.Linear) -> ViT:
    """A copy of the frozen backbone carrying ``head``: the linear arm as one model, in eval mode."""
    model = copy.deepcopy(backbone)
    model.reset_head(head.out_features)
    model.heads.head.load_state_dict(head.state_dict())
    return model.to(next(backbone.parameters()).device).eval()


def load_linear(backbone_model: str, source: str, num_classes: int, seed: int, runtime: Runtime) -> ViT:
    """The frozen backbone (ViT preset ``backbone_model``, pretrained by ``source``) with one seed's head on it,
    in eval mode."""
    model = load_backbone(backbone_model, runtime, source)
    model.reset_head(num_classes)
    model.heads.head.load_state_dict(load_head(seed, model.config.hidden_dim, num_classes).state_dict())
    return model.eval()


def finetune_model(backbone: ViT, num_classes: int) -> ViT:
    """A trainable copy of the pretrained backbone with a new zero-initialised head (paper, section 3.2)."""
    config = dataclasses.replace(backbone.config, num_classes=num_classes)
    model = ViT(config)
    state = {k: v for k, v in backbone.state_dict().items() if not k.startswith("heads.")}
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or set(missing) != {"heads.head.weight", "heads.head.bias"}:
        raise RuntimeError(f"backbone and model differ beyond the head: missing {missing}, unexpected {unexpected}")
    return model


# --- model cards -----------------------------------------------------------------------------------------------


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


def write_model_card(folder: Path, card: dict) -> None:
    write_json(Path(folder) / MODEL_CARD, card)


CARD_KEYS = ("arm", "model_name", "model", "classes", "mean", "std", "transform", "seeds")


def check_model_card(card, path: Path, prepared_classes: list[str] | None = None) -> dict:
    """``card`` if it describes a usable model, else one line naming ``path`` and the stage to rerun: every key,
    a known ViT preset, at least one seed, one mean and std per input channel, one class per output, and (where
    the prepared data is here) its classes in the prepared data's order, which the model's outputs follow."""
    if not isinstance(card, dict) or any(key not in card for key in CARD_KEYS):
        missing = [k for k in CARD_KEYS if not isinstance(card, dict) or k not in card]
        raise UserError(f"{path} is not a model card (it lacks {missing}); rerun `dvc repro` to write it")
    arm = card["arm"]
    fix = rerun(CARD_STAGES[arm]) if arm in CARD_STAGES else rerun(" ".join(CARD_STAGES.values()))

    def check(condition: bool, problem: str) -> None:
        if not condition:
            raise UserError(f"{path}: {problem}; {fix}")

    name, seeds, classes, model = card["model_name"], card["seeds"], card["classes"], card["model"]
    check(arm in CARD_STAGES, f"arm {arm!r} is not one of {sorted(CARD_STAGES)}")
    check(name in PRESETS, f"model_name {name!r} is not a known ViT preset (one of {sorted(PRESETS)})")
    check(isinstance(seeds, list) and len(seeds) >= 1 and all(isinstance(s, int) for s in seeds),
          f"seeds must list the trained seeds, got {seeds!r}")  # fmt: skip
    model = model if isinstance(model, dict) else {}
    channels, outputs = model.get("in_channels"), model.get("num_classes")
    mean, std = card["mean"], card["std"]
    check(isinstance(mean, list) and isinstance(std, list) and len(mean) == len(std) == channels,
          f"mean {mean} and std {std} need one value per input channel ({channels})")  # fmt: skip
    check(outputs == len(classes), f"{len(classes)} classes {classes} for a model with {outputs} outputs")
    if prepared_classes is not None and list(classes) != list(prepared_classes):
        how = "in another order than" if sorted(classes) == sorted(prepared_classes) else "other than"
        check(False, f"classes {classes} are {how} the prepared data's {prepared_classes} "
              f"({paths.PREPARED / 'info.json'}), so the outputs would be mislabelled")  # fmt: skip
    return card


def read_model_card(folder: Path, prepared_info: Path = paths.PREPARED / "info.json") -> dict:
    """The model card a training stage wrote beside its checkpoints, checked (:func:`check_model_card`) against
    the prepared data's classes where ``prepared_info`` exists (a teammate with only ``models/`` has none).

    Raises:
        UserError: it is missing, unreadable or inconsistent (the stage has not run, or ran before cards existed).
    """
    path = Path(folder) / MODEL_CARD
    try:
        card = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise UserError(
            f"{path} is missing or unreadable ({type(error).__name__}); run `dvc repro` (or `dvc pull`) to get "
            "the trained models with their card"
        ) from None
    prepared = read_json(prepared_info).get("classes") if prepared_info.is_file() else None
    return check_model_card(card, path, prepared)


def card_files(card: dict, arm: str, seed: int) -> list[Path]:
    """The checkpoints ``arm``'s model of ``seed`` is built from, as its card describes it."""
    source = card.get("backbone", "supervised")  # cards from before offline.backbone existed: supervised
    return [paths.scratch_model(seed)] if arm == "scratch" else [paths.BACKBONES[source], paths.linear_probe(seed)]


def load_from_card(card: dict, arm: str, seed: int, runtime: Runtime) -> ViT:
    """The trained model of ``arm`` and ``seed``, built from its card's architecture, in eval mode."""
    if arm == "scratch":
        return load_scratch(card["model_name"], len(card["classes"]), seed, runtime)
    return load_linear(card["model_name"], card.get("backbone", "supervised"), len(card["classes"]), seed, runtime)
