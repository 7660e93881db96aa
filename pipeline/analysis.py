"""Stage analysis: where the trained ViTs attend, what their position embeddings learned, and how the
pretrained arm copes with another input size (paper Sec. 3.2 and 4.5, Fig. 6 and 7; seeds 001 and 003).

Writes ``plots/attention.png`` (class-token attention per layer and attention rollout, both arms, the
first test image of each class), ``plots/position_similarity.png`` (Fig. 7 centre, both arms) and
``metrics/resolution.json`` (the pretrained arm at its training size and at about 1.5x, with bicubically
interpolated position embeddings and bilinearly upsampled test images; no fine-tuning at the new size).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from pipeline import paths
from pipeline.config import Params, load_params
from pipeline.data import ImageSet, load_split
from pipeline.engine import evaluate, extract_features
from pipeline.errors import UserError, stage_main
from pipeline.files import atomic_path, load_tensors, write_json
from pipeline.finetune_head import load_backbone
from pipeline.metrics import spread
from pipeline.model import ViT, vit_config
from pipeline.runtime import Runtime, resolve_runtime

MAX_IMAGES = 4  # the first test image of each class, for at most this many classes
MAX_LAYERS = 6  # attention.png columns; evenly spaced layers when the model has more
RESOLUTION_SCALE = 1.5  # the other input size, rounded to a multiple of the patch size
LABELS = {"scratch": "from scratch", "pretrained": "pretrained + head"}


def load_scratch(params: Params, num_classes: int, seed: int, runtime: Runtime) -> ViT:
    """The from-scratch ViT of one seed, in eval mode."""
    model = ViT(vit_config(params.model_name, num_classes=num_classes))
    state = load_tensors(paths.scratch_model(seed))
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as error:
        raise UserError(
            f"{paths.scratch_model(seed)} does not fit model {params.model_name!r} with {num_classes} classes "
            f"({str(error).splitlines()[0]}); rerun `dvc repro`"
        ) from None
    return model.to(runtime.device).eval()


def load_head(seed: int, hidden_dim: int, num_classes: int) -> nn.Linear:
    """One seed's trained linear head for the pretrained arm."""
    state = load_tensors(paths.head_model(seed))
    head = nn.Linear(hidden_dim, num_classes)
    try:
        head.load_state_dict({"weight": state["heads.head.weight"], "bias": state["heads.head.bias"]})
    except (KeyError, RuntimeError) as error:
        raise UserError(
            f"{paths.head_model(seed)} does not fit a {hidden_dim}-wide backbone with {num_classes} classes "
            f"({type(error).__name__}: {str(error).splitlines()[0][:200]}); rerun `dvc repro`"
        ) from None
    return head


def load_pretrained(params: Params, num_classes: int, seed: int, runtime: Runtime) -> ViT:
    """The frozen backbone with one seed's head on it, in eval mode."""
    model = load_backbone(params, runtime)
    model.reset_head(num_classes)
    model.heads.head.load_state_dict(load_head(seed, model.config.hidden_dim, num_classes).state_dict())
    return model.eval()


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


def resolution_change(params: Params, test_set: ImageSet, runtime: Runtime) -> dict:
    """The pretrained arm (backbone + each seed's head) at its training size and at :func:`other_size`."""
    backbone = load_backbone(params, runtime)
    heads = {seed: load_head(seed, backbone.config.hidden_dim, len(test_set.classes)) for seed in params.seeds}
    config, batch = backbone.config, params.evaluate.batch_size
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


def to_display(image: torch.Tensor) -> tuple:
    """uint8 (C, H, W) -> an array and colour map for ``imshow``."""
    if image.shape[0] == 1:
        return image[0].numpy(), "gray"
    return image.permute(1, 2, 0).numpy(), None


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


def save(figure, name: str) -> None:
    with atomic_path(paths.PLOTS / name) as tmp:
        figure.savefig(tmp, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})


def plot_attention(plt, panels: dict[str, dict], image_sets: dict[str, ImageSet], indices: list[int]) -> None:
    layers = {arm: shown_layers(p["layers"].shape[1]) for arm, p in panels.items()}
    columns = 2 + max(len(v) for v in layers.values())
    rows = [(arm, i) for i in range(len(indices)) for arm in panels]
    figure, axes = plt.subplots(len(rows), columns, figsize=(1.45 * columns, 1.6 * len(rows)), squeeze=False)
    for row, (arm, i) in enumerate(rows):
        image_set, panel = image_sets[arm], panels[arm]
        image = image_set.images[indices[i]]
        shown, cmap = to_display(image)
        height, width = image.shape[-2:]
        probabilities = panel["probabilities"][i]
        predicted = int(probabilities.argmax())
        truth = image_set.classes[int(image_set.labels[indices[i]])]
        # layer maps from column 1, the rollout always in the last column
        maps = {1 + n: (f"layer {k + 1}", panel["layers"][i, k]) for n, k in enumerate(layers[arm])}
        maps[columns - 1] = ("rollout", panel["rollout"][i])
        axes[row, 0].imshow(shown, cmap=cmap)
        axes[row, 0].set_title(
            f"{LABELS[arm]}\n{truth} -> {image_set.classes[predicted]} {probabilities[predicted]:.2f}", fontsize=7
        )
        for column in range(1, columns):
            axis = axes[row, column]
            axis.axis("off")
            if column in maps:
                title, values = maps[column]
                axis.imshow(shown, cmap=cmap)
                axis.imshow(upsample_map(values, height, width).numpy(), cmap="inferno", alpha=0.6)
                axis.set_title(title, fontsize=7)
        axes[row, 0].set_xticks([])
        axes[row, 0].set_yticks([])
    figure.suptitle(
        "Class token's attention over patches, mean over heads, per layer; rollout through all layers "
        "(Abnar & Zuidema 2020). Each map on its own colour scale; first test image of each class",
        fontsize=8,
    )
    save(figure, "attention.png")
    plt.close(figure)


def similarity_mosaic(similarity: torch.Tensor) -> torch.Tensor:
    """(g, g, g, g) -> one (g*(g+1)-1, g*(g+1)-1) image of g x g small maps separated by NaN gaps."""
    grid = similarity.shape[0]
    side = grid * (grid + 1) - 1
    mosaic = torch.full((side, side), float("nan"))
    for i in range(grid):
        for j in range(grid):
            top, left = i * (grid + 1), j * (grid + 1)
            mosaic[top : top + grid, left : left + grid] = similarity[i, j]
    return mosaic


def plot_position_similarity(plt, embeddings: dict[str, torch.Tensor]) -> None:
    figure, axes = plt.subplots(1, len(embeddings), figsize=(5.2 * len(embeddings), 5), squeeze=False)
    cmap = plt.get_cmap("viridis").with_extremes(bad="white")
    for axis, (arm, pos_embedding) in zip(axes[0], embeddings.items(), strict=True):
        similarity = position_similarity(pos_embedding)
        grid = similarity.shape[0]
        image = axis.imshow(similarity_mosaic(similarity).numpy(), cmap=cmap, vmin=-1, vmax=1)
        centres = [i * (grid + 1) + (grid - 1) / 2 for i in range(grid)]
        axis.set_xticks(centres, [str(i + 1) for i in range(grid)], fontsize=7)
        axis.set_yticks(centres, [str(i + 1) for i in range(grid)], fontsize=7)
        axis.set(xlabel="input patch column", ylabel="input patch row", title=f"{LABELS[arm]} ({grid}x{grid} patches)")
    figure.colorbar(image, ax=axes[0].tolist(), shrink=0.8, label="cosine similarity")
    figure.suptitle("Position embedding similarity (paper Fig. 7, centre): each small map is one position", fontsize=9)
    save(figure, "position_similarity.png")
    plt.close(figure)


@stage_main
def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    params = load_params()
    runtime = resolve_runtime(params.runtime)
    first = params.seeds[0]
    image_sets = {arm: load_split(paths.prepared_split(arm, "test")) for arm in paths.ARMS}
    num_classes = len(image_sets["scratch"].classes)
    models = {
        "scratch": load_scratch(params, num_classes, first, runtime),
        "pretrained": load_pretrained(params, num_classes, first, runtime),
    }
    indices = first_of_each_class(image_sets["scratch"].labels)
    panels = {arm: attention_panels(models[arm], image_sets[arm], indices, runtime) for arm in paths.ARMS}
    plot_attention(plt, panels, image_sets, indices)
    plot_position_similarity(plt, {arm: models[arm].encoder.pos_embedding.cpu() for arm in paths.ARMS})

    resolution = resolution_change(params, image_sets["pretrained"], runtime)
    write_json(paths.METRICS / "resolution.json", resolution)
    for key in ("train_size", "other_size"):
        acc = resolution[key]["test_acc"]
        print(
            f"analysis: pretrained at {resolution[key]['size']}px: test accuracy {acc['mean']:.4f} ± {acc['std']:.4f} "
            f"over seeds {params.seeds}"
        )
    print(
        f"analysis: wrote attention.png, position_similarity.png to {paths.PLOTS}/ and {paths.METRICS}/resolution.json"
    )


if __name__ == "__main__":
    main()
