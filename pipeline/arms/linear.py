"""Arm ``linear``: the pretrained backbone frozen, a linear head on its features. On the curve, the head is
the paper's few-shot probe (closed form, :mod:`pipeline.probe`); in the headline, seed 000's head trained
with Adam (the linear_probe stage). Its checkpoints, evaluation and curve runs."""

from __future__ import annotations

import copy

import torch
from torch import nn

from pipeline import paths
from pipeline.arms import REGISTRY
from pipeline.arms.common import Curve, load_point, probe_record
from pipeline.curve import seed_subset
from pipeline.data import ImageSet, batch_preparer
from pipeline.engine import Evaluation, evaluate, extract_features
from pipeline.errors import UserError
from pipeline.files import load_tensors
from pipeline.model import ViT
from pipeline.pretraining import load_backbone
from pipeline.probe import Probe, fit_probe
from pipeline.runtime import Runtime

VIEW = REGISTRY["linear"].view


def point_data(curve: Curve, point: int) -> dict:
    """The point's sets, with the frozen backbone's features of validation and test computed once."""
    data = load_point(curve, VIEW, point)
    runtime, batch = curve.runtime, curve.eval_batch_size
    data["backbone"] = backbone = load_backbone(curve.backbone_model, runtime, curve.backbone_source)
    data["val_features"] = extract_features(backbone, data["val"].images, runtime, batch, data["score"])
    data["test_features"] = extract_features(backbone, data["test"].images, runtime, batch, data["score"])
    return data


def seed_probe(curve: Curve, data: dict, seed: int) -> tuple[Probe, torch.Tensor, ImageSet]:
    """The few-shot probe on the frozen features of this seed's subset; returns it, those features and the subset.
    Fitted once per seed and point: fine-tuning's lr trials start from the same probe."""
    fitted = data.setdefault("probes", {})
    if seed not in fitted:
        fitted[seed] = fit_seed_probe(curve, data, seed)
    return fitted[seed]


def fit_seed_probe(curve: Curve, data: dict, seed: int) -> tuple[Probe, torch.Tensor, ImageSet]:
    train_set = seed_subset(data["pool"], data["n"], seed)
    features = extract_features(data["backbone"], train_set.images, curve.runtime, curve.eval_batch_size,
                                data["score"])  # fmt: skip
    probe = fit_probe(features, train_set.labels, data["val_features"], data["val"].labels, data["num_classes"],
                      curve.config.probe_regs)  # fmt: skip
    return probe, features, train_set


def run_seed(curve: Curve, data: dict, seed: int, lr: float | None = None) -> dict:
    """The probe on this seed's subset; ``lr`` is unused (a closed form has none)."""
    probe, features, train_set = seed_probe(curve, data, seed)
    return probe_record(probe, (features, train_set.labels), data)


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


def load_linear(backbone_model: str, source: str, num_classes: int, seed: int, runtime: Runtime) -> ViT:
    """The frozen backbone (ViT preset ``backbone_model``, pretrained by ``source``) with one seed's head on it,
    in eval mode."""
    model = load_backbone(backbone_model, runtime, source)
    model.reset_head(num_classes)
    model.heads.head.load_state_dict(load_head(seed, model.config.hidden_dim, num_classes).state_dict())
    return model.eval()


def evaluate_linear(
    backbone_model: str, source: str, seeds: list[int], test_set: ImageSet, runtime: Runtime, batch_size: int
) -> tuple[dict[int, Evaluation], ViT]:
    """Each seed's linear probe on the frozen backbone's test features; returns the results and the model
    with the last seed's head."""
    model = load_backbone(backbone_model, runtime, source)
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
