"""Arm ``linear``: the pretrained backbone frozen, a new linear head trained on features computed once
(seed 000's "pretrained ViT feature extractor"). Its checkpoints, evaluation and curve runs."""

from __future__ import annotations

import copy

import torch
from torch import nn

from pipeline import paths
from pipeline.arms.common import Curve, curve_recipe, load_point, seeded_run
from pipeline.data import ImageSet, batch_preparer
from pipeline.engine import Evaluation, evaluate, extract_features
from pipeline.errors import UserError
from pipeline.files import load_tensors
from pipeline.model import ViT
from pipeline.pretraining import load_backbone
from pipeline.runtime import Runtime

VIEW = "pretrained"


def point_data(curve: Curve, point: int) -> dict:
    """The point's images turned into the frozen backbone's features, once."""
    data = load_point(curve, VIEW, point)
    runtime, batch = curve.runtime, curve.eval_batch_size
    backbone = load_backbone(curve.backbone_model, runtime)
    no_augment = batch_preparer(data["train_all"], augment_train=False)
    data["train_inputs"] = extract_features(backbone, data["train_inputs"], runtime, batch, no_augment)
    data["test_inputs"] = extract_features(backbone, data["test_inputs"], runtime, batch, data["test_prepare"])
    data["prepare"] = data["test_prepare"] = lambda inputs, training, generator: inputs
    return data


def run_seed(curve: Curve, data: dict, seed: int) -> tuple[dict, float, float, int]:
    """One curve run: ``data_hunger.linear``'s optimiser on the features, for the fixed step budget."""
    recipe = curve_recipe(curve.config, "linear")

    def build() -> nn.Linear:
        return nn.Linear(data["train_inputs"].shape[1], data["num_classes"])

    return seeded_run(curve, data, seed, recipe, build, f"linear seed {seed}")


def head_state(head: nn.Linear) -> dict[str, torch.Tensor]:
    """The head's weights under the names they have inside the ViT."""
    return {"heads.head.weight": head.weight.detach().cpu(), "heads.head.bias": head.bias.detach().cpu()}


def load_head(seed: int, hidden_dim: int, num_classes: int) -> nn.Linear:
    """One seed's trained linear head (the linear_probe stage's)."""
    state = load_tensors(paths.linear_probe(seed))
    head = nn.Linear(hidden_dim, num_classes)
    try:
        head.load_state_dict({"weight": state["heads.head.weight"], "bias": state["heads.head.bias"]})
    except (KeyError, RuntimeError) as error:
        raise UserError(
            f"{paths.linear_probe(seed)} does not fit a {hidden_dim}-wide backbone with {num_classes} classes "
            f"({type(error).__name__}: {str(error).splitlines()[0][:200]}); rerun `dvc repro`"
        ) from None
    return head


def with_head(backbone: ViT, head: nn.Linear) -> ViT:
    """A copy of the frozen backbone carrying ``head``: the linear arm as one model, in eval mode."""
    model = copy.deepcopy(backbone)
    model.reset_head(head.out_features)
    model.heads.head.load_state_dict(head.state_dict())
    return model.to(next(backbone.parameters()).device).eval()


def load_linear(backbone_model: str, num_classes: int, seed: int, runtime: Runtime) -> ViT:
    """The frozen backbone (ViT preset ``backbone_model``) with one seed's head on it, in eval mode."""
    model = load_backbone(backbone_model, runtime)
    model.reset_head(num_classes)
    model.heads.head.load_state_dict(load_head(seed, model.config.hidden_dim, num_classes).state_dict())
    return model.eval()


def evaluate_linear(
    backbone_model: str, seeds: list[int], test_set: ImageSet, runtime: Runtime, batch_size: int
) -> tuple[dict[int, Evaluation], ViT]:
    """Each seed's linear probe on the frozen backbone's test features; returns the results and the model
    with the last seed's head."""
    model = load_backbone(backbone_model, runtime)
    features = extract_features(model, test_set.images, runtime, batch_size, batch_preparer(test_set, False))
    model.reset_head(len(test_set.classes))
    results = {}
    for seed in seeds:
        state = load_tensors(paths.linear_probe(seed))
        head = nn.Linear(model.config.hidden_dim, len(test_set.classes))
        head.load_state_dict({"weight": state["heads.head.weight"], "bias": state["heads.head.bias"]})
        results[seed] = evaluate(head.to(runtime.device), features, test_set.labels, runtime, len(features))
    model.heads.head.load_state_dict(head.state_dict())
    return results, model
