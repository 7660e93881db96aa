"""pipeline.results.attention_figures: the position-similarity mosaic and the figures drawn from model tensors."""

from __future__ import annotations

import torch

from pipeline.results.attention_figures import similarity_mosaic, to_display


def test_the_mosaic_puts_patch_i_js_map_at_block_i_j_with_nan_gaps_between():
    grid = 3
    similarity = torch.arange(grid**4, dtype=torch.float32).reshape(grid, grid, grid, grid)
    mosaic = similarity_mosaic(similarity)
    assert mosaic.shape == (grid * (grid + 1) - 1,) * 2  # 11 x 11: 3 maps of 3 and 2 gaps per side
    for i in range(grid):
        for j in range(grid):
            top, left = i * (grid + 1), j * (grid + 1)
            assert torch.equal(mosaic[top : top + grid, left : left + grid], similarity[i, j])
    gaps = torch.tensor([k % (grid + 1) == grid for k in range(mosaic.shape[0])])
    assert mosaic[gaps].isnan().all() and mosaic[:, gaps].isnan().all()
    assert not mosaic[~gaps][:, ~gaps].isnan().any()


def test_to_display_shows_grey_images_with_a_grey_map_and_colour_ones_channels_last():
    grey = torch.randint(0, 256, (1, 4, 5), dtype=torch.uint8)
    array, cmap = to_display(grey)
    assert cmap == "gray" and array.shape == (4, 5) and (array == grey[0].numpy()).all()
    colour = torch.randint(0, 256, (3, 4, 5), dtype=torch.uint8)
    array, cmap = to_display(colour)
    assert cmap is None and array.shape == (4, 5, 3) and (array[1, 2] == colour[:, 1, 2].numpy()).all()
