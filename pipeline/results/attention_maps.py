"""Where a ViT attends and what its position embeddings learned (paper Sec. 3.2 and 4.5, Fig. 6 and 7;
seeds 001 and 003), and the pretrained arm at another input size."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from pipeline.data.images import ImageSet
from pipeline.models.vit import ViT
from pipeline.results.stats import spread
from pipeline.train.checkpoints import load_backbone, load_head
from pipeline.train.loop import evaluate, extract_features
from pipeline.train.runtime import Runtime

MAX_IMAGES = 4  # the first test image of each class, for at most this many classes


MAX_LAYERS = 6  # attention.png columns; evenly spaced layers when the model has more


RESOLUTION_SCALE = 1.5  # the other input size, rounded to a multiple of the patch size


def first_of_each_class(labels: torch.Tensor, limit: int = MAX_IMAGES) -> list[int]:
    """Index of the first image of each class, in class order, for at most ``limit`` classes.

    Fixed by position in the test set, never chosen by a score.
    """
    indices = []
    for class_id in range(int(labels.max()) + 1):
        found = torch.nonzero(labels == class_id)
        if len(found):
            indices.append(int(found[0]))
        if len(indices) == limit:
            break
    return indices


def cls_attention(attention: list[torch.Tensor]) -> torch.Tensor:
    """The class token's attention over the patches, averaged over heads: per layer (B, h, T, T) -> (B, L, T-1)."""
    # (B, h, T, T) -> row 0 (the class token's query), patch columns -> (B, h, T-1) -> (B, T-1)
    return torch.stack([a[:, :, 0, 1:].float().mean(dim=1) for a in attention], dim=1)


def attention_rollout(attention: list[torch.Tensor]) -> torch.Tensor:
    """Attention rollout (Abnar & Zuidema 2020) through every layer: per layer (B, h, T, T) -> (B, T, T).

    Each layer's heads are averaged, the identity is added for the residual connection and rows are
    renormalised to sum to 1; the layers are then multiplied, last layer on the left. Row 0 over
    columns 1: is how much each patch's input reaches the class token at the output.
    """
    rollout = None
    for weights in attention:
        mixed = weights.float().mean(dim=1)  # (B, h, T, T) -> (B, T, T)
        mixed = mixed + torch.eye(mixed.shape[-1], device=mixed.device)
        mixed = mixed / mixed.sum(dim=-1, keepdim=True)
        rollout = mixed if rollout is None else mixed @ rollout
    if rollout is None:
        raise ValueError("attention_rollout needs at least one layer's attention")
    return rollout


def position_similarity(pos_embedding: torch.Tensor) -> torch.Tensor:
    """Cosine similarity of every patch's position embedding with every other's, as in the paper's Fig. 7.

    Args:
        pos_embedding: (1, 1 + g*g, D), the class token's embedding first (it is left out).

    Returns:
        (g, g, g, g): entry [i, j] is the (g, g) map of position (i, j)'s similarity to every position.
    """
    patches = pos_embedding[0, 1:].detach().float()  # (g*g, D)
    grid = round(len(patches) ** 0.5)
    if grid * grid != len(patches):
        raise ValueError(f"{len(patches)} patch positions do not form a square grid")
    unit = F.normalize(patches, dim=-1)
    # (g*g, D) @ (D, g*g) -> (g*g, g*g) -> (g, g, g, g)
    return (unit @ unit.T).reshape(grid, grid, grid, grid)


def resize_images(images: torch.Tensor, size: int) -> torch.Tensor:
    """uint8 (B, C, H, W) -> uint8 (B, C, size, size), bilinear."""
    if images.shape[-1] == size and images.shape[-2] == size:
        return images
    resized = F.interpolate(images.float(), size=(size, size), mode="bilinear", align_corners=False)
    return resized.round().clamp(0, 255).to(torch.uint8)


def other_size(image_size: int, patch_size: int, scale: float = RESOLUTION_SCALE) -> int:
    """``scale`` times ``image_size``, rounded to a multiple of ``patch_size`` (28, 7 -> 42; 224, 16 -> 336)."""
    return max(1, round(image_size * scale / patch_size)) * patch_size


def accuracy_at_size(
    backbone: ViT, heads: dict[int, nn.Linear], test_set: ImageSet, size: int, runtime: Runtime, batch_size: int
) -> dict:
    """Test accuracy of every seed's head on a copy of ``backbone`` fed ``size`` x ``size`` images.

    The copy's position embeddings are interpolated to the new grid when ``size`` differs from the
    training size; the test images are upsampled from the prepared uint8 tensors. Nothing is retrained.
    """
    model = backbone
    if size != backbone.config.image_size:
        model = ViT(backbone.config).to(runtime.device)
        model.load_state_dict(backbone.state_dict())
        model.interpolate_position_embeddings(size)
        model.eval()

    def prepare(images: torch.Tensor, training: bool, generator) -> torch.Tensor:
        return test_set.normalise(resize_images(images, size))

    features = extract_features(model, test_set.images, runtime, batch_size, prepare)
    accuracies = [
        evaluate(head.to(runtime.device), features, test_set.labels, runtime, len(features)).accuracy
        for head in heads.values()
    ]
    return {"size": size, "test_acc": spread(accuracies)}


def resolution_change(
    backbone_model: str, source: str, seeds: list[int], test_set: ImageSet, runtime: Runtime, batch: int
) -> dict:
    """The linear arm (backbone + each seed's head) at its training size and at :func:`other_size`."""
    backbone = load_backbone(backbone_model, runtime, source)
    heads = {seed: load_head(seed, backbone.config.hidden_dim, len(test_set.classes)) for seed in seeds}
    config = backbone.config
    new_size = other_size(config.image_size, config.patch_size)
    return {
        "train_size": accuracy_at_size(backbone, heads, test_set, config.image_size, runtime, batch),
        "other_size": accuracy_at_size(backbone, heads, test_set, new_size, runtime, batch),
    }


def upsample_map(values: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """(N,) patch values on a square grid -> (height, width), bilinear, for overlaying on the image."""
    grid = round(len(values) ** 0.5)
    # (N,) -> (1, 1, g, g) -> (1, 1, H, W) -> (H, W)
    grid_map = values.float().reshape(1, 1, grid, grid)
    return F.interpolate(grid_map, size=(height, width), mode="bilinear", align_corners=False)[0, 0]


def shown_layers(num_layers: int, limit: int = MAX_LAYERS) -> list[int]:
    """0-based layer indices to draw: all of them, or ``limit`` evenly spaced ones ending at the last."""
    if num_layers <= limit:
        return list(range(num_layers))
    return sorted({round(i * (num_layers - 1) / (limit - 1)) for i in range(limit)})


@torch.no_grad()
def attention_panels(model: ViT, image_set: ImageSet, indices: list[int], runtime: Runtime) -> dict:
    """Per-layer class-token attention, rollout and predictions of ``model`` for the chosen images."""
    inputs = image_set.normalise(image_set.images[indices]).to(runtime.device)
    attention = model.attention_maps(inputs)
    probabilities = torch.softmax(model(inputs).float(), dim=-1).cpu()
    return {
        "layers": cls_attention(attention).cpu(),  # (B, L, N)
        "rollout": attention_rollout(attention)[:, 0, 1:].cpu(),  # (B, N)
        "probabilities": probabilities,
    }
