"""The analysis stage's PNGs, drawn from what the trained ViTs compute (:mod:`pipeline.results.attention_maps`):
class-token
attention per layer with its rollout, and the position embeddings' similarity (paper Fig. 6 and 7)."""

from __future__ import annotations

import torch

from pipeline.data.images import ImageSet
from pipeline.results.attention_maps import position_similarity, shown_layers, upsample_map
from pipeline.results.figures import save

ATTENTION_LABELS = {"scratch": "from scratch", "linear": "pretrained + head"}  # short, for small panels


def to_display(image: torch.Tensor) -> tuple:
    """uint8 (C, H, W) -> an array and colour map for ``imshow``."""
    if image.shape[0] == 1:
        return image[0].numpy(), "gray"
    return image.permute(1, 2, 0).numpy(), None


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
            f"{ATTENTION_LABELS[arm]}\n{truth} -> {image_set.classes[predicted]} {probabilities[predicted]:.2f}",
            fontsize=7,
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
        axis.set(
            xlabel="input patch column",
            ylabel="input patch row",
            title=f"{ATTENTION_LABELS[arm]} ({grid}x{grid} patches)",
        )
    figure.colorbar(image, ax=axes[0].tolist(), shrink=0.8, label="cosine similarity")
    figure.suptitle("Position embedding similarity (paper Fig. 7, centre): each small map is one position", fontsize=9)
    save(figure, "position_similarity.png")
    plt.close(figure)
