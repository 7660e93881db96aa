"""pipeline.results.attention_maps: class-token attention, rollout, position similarity, and the layers shown."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from tiny_project import random_vit

from pipeline.results.attention_maps import (
    attention_rollout,
    cls_attention,
    first_of_each_class,
    other_size,
    position_similarity,
    shown_layers,
)

# --- attention, rollout, position similarity -------------------------------------------------


def test_rollout_of_one_layer_is_its_head_mean_plus_identity_renormalised():
    model = random_vit(0, 3, num_layers=1).eval()
    attention = model.attention_maps(torch.randn(2, 3, 32, 32))
    rollout = attention_rollout(attention)
    mixed = attention[0].mean(dim=1) + torch.eye(17)
    torch.testing.assert_close(rollout, mixed / mixed.sum(dim=-1, keepdim=True))
    torch.testing.assert_close(rollout.sum(dim=-1), torch.ones(2, 17))


def test_rollout_multiplies_layers_last_on_the_left_and_rows_sum_to_one():
    model = random_vit(0, 3, num_layers=3).eval()
    attention = model.attention_maps(torch.randn(2, 3, 32, 32))
    rollout = attention_rollout(attention)
    steps = [attention_rollout([a]) for a in attention]
    torch.testing.assert_close(rollout, steps[2] @ steps[1] @ steps[0])
    torch.testing.assert_close(rollout.sum(dim=-1), torch.ones(2, 17))
    assert (rollout >= 0).all()


def test_cls_attention_is_the_class_token_row_over_patches_averaged_over_heads():
    model = random_vit(0, 3).eval()
    attention = model.attention_maps(torch.randn(2, 3, 32, 32))
    maps = cls_attention(attention)
    assert maps.shape == (2, 2, 16)  # (B, layers, patches)
    torch.testing.assert_close(maps[:, 1], attention[1][:, :, 0, 1:].mean(dim=1))


def test_position_similarity_has_ones_on_the_diagonal_and_is_symmetric():
    pos = random_vit(0, 3).encoder.pos_embedding  # (1, 1 + 4*4, D)
    similarity = position_similarity(pos)
    assert similarity.shape == (4, 4, 4, 4)
    flat = similarity.reshape(16, 16)
    torch.testing.assert_close(flat.diagonal(), torch.ones(16))
    torch.testing.assert_close(flat, flat.T)
    positions = pos[0, 1:].detach()  # the class token's embedding is left out
    expected = F.cosine_similarity(positions[:, None], positions[None], dim=-1)  # (16, 16)
    torch.testing.assert_close(flat, expected)


def test_first_of_each_class_is_fixed_by_index_and_capped():
    labels = torch.tensor([2, 0, 1, 0, 1, 2, 3, 4])
    assert first_of_each_class(labels, limit=4) == [1, 2, 0, 6]


@pytest.mark.parametrize(("size", "patch", "expected"), [(28, 7, 42), (224, 16, 336), (32, 8, 48), (32, 32, 64)])
def test_other_size_is_about_one_and_a_half_times_in_whole_patches(size, patch, expected):
    assert other_size(size, patch) == expected


def test_shown_layers_keeps_all_or_spreads_them_to_the_last():
    assert shown_layers(6) == [0, 1, 2, 3, 4, 5]
    assert shown_layers(12) == [0, 2, 4, 7, 9, 11]
