"""Tests that pin the ViT to the paper and to torchvision: sizes, names, logits, gradients, errors.

Big models are built on the meta device, which allocates nothing, so counting the parameters of
ViT-H/14 costs no memory. Everything else runs on the CPU, in float32 except the bf16 autocast test.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import assert_close_fp32
from torch import nn

from pipeline.models.torchvision_reference import TORCHVISION_BUILDERS, torchvision_vit, torchvision_vit_from_config
from pipeline.models.vit import EncoderBlock, ViT, ViTConfig, vit_config
from pipeline.train.loop import count_parameters

TABLE_1 = ["B/16", "B/32", "L/16", "L/32", "H/14"]


def randomise_head_(model: ViT, std: float = 0.5) -> None:
    """Gives the zero-initialised head random weights, so logits and gradients carry information."""
    with torch.no_grad():
        nn.init.normal_(model.heads.head.weight, std=std)
        nn.init.normal_(model.heads.head.bias, std=std)


def perturb_(model: nn.Module, std: float = 0.02) -> None:
    """Adds Gaussian noise to every parameter, so zero-initialised ones (head, class token) matter."""
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * std)


def images_for(config: ViTConfig, batch_size: int = 2) -> torch.Tensor:
    """Standard-normal images of the size and channel count ``config`` expects."""
    return torch.randn(batch_size, config.in_channels, config.image_size, config.image_size)


# --- sizes and names -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "num_classes", "expected"),
    [
        ("B/16", 3, 85_800_963),  # seed 000, with its 3-class head
        ("B/16", 1000, 86_567_656),  # torchvision's published ViT_B_16_Weights metadata
        ("seed-small", 3, 5_939_139),  # seed 000's "vit_small"
    ],
)
def test_parameter_count_matches_published_numbers(name, num_classes, expected):
    with torch.device("meta"):
        model = ViT(vit_config(name, num_classes=num_classes))
    assert count_parameters(model) == expected


@pytest.mark.parametrize("name", TABLE_1)
def test_table_1_presets_match_torchvision(name):
    with torch.device("meta"):
        ours = ViT(vit_config(name))
        reference = torchvision_vit(name)
    assert count_parameters(ours) == count_parameters(reference)
    ours_shapes = {key: tuple(value.shape) for key, value in ours.state_dict().items()}
    reference_shapes = {key: tuple(value.shape) for key, value in reference.state_dict().items()}
    assert ours_shapes == reference_shapes


# --- logit parity with torchvision -----------------------------------------------------------


def build_pair(name: str) -> tuple[ViT, nn.Module]:
    """Our ViT and torchvision's for a preset, torchvision's from its named builder where it has one."""
    config = vit_config(name)
    reference = torchvision_vit(name) if name in TORCHVISION_BUILDERS else torchvision_vit_from_config(config)
    return ViT(config), reference


@pytest.mark.parametrize("name", ["B/16", "tiny"])
@pytest.mark.parametrize("direction", ["torchvision->ours", "ours->torchvision"])
def test_logits_match_torchvision_after_loading_weights(name, direction):
    torch.manual_seed(0)
    ours, reference = build_pair(name)
    source, target = (reference, ours) if direction == "torchvision->ours" else (ours, reference)
    perturb_(source)
    target.load_state_dict(source.state_dict(), strict=True)
    ours.eval()
    reference.eval()
    x = images_for(ours.config)
    with torch.inference_mode():
        ours_logits, reference_logits = ours(x), reference(x)
    difference = (ours_logits - reference_logits).abs().max().item()
    print(
        f"\n{name} {direction}: max |logit difference| {difference:.3e}, "
        f"logit scale {reference_logits.abs().max().item():.3f}"
    )
    assert reference_logits.abs().max() > 0.1  # a zero head would make the comparison vacuous
    assert_close_fp32(ours_logits, reference_logits, terms=ours.config.mlp_dim)


# --- pieces of the model against the paper ---------------------------------------------------


def transformer_encoder_layer_like(block: EncoderBlock, config: ViTConfig) -> nn.TransformerEncoderLayer:
    """PyTorch's built-in pre-norm layer, with the paper's sizes and ``block``'s weights."""
    layer = nn.TransformerEncoderLayer(
        config.hidden_dim,
        config.num_heads,
        config.mlp_dim,
        dropout=0.0,
        activation="gelu",
        batch_first=True,
        norm_first=True,
        layer_norm_eps=1e-6,
    )
    renames = {
        "self_attention.": "self_attn.",
        "mlp.0.": "linear1.",
        "mlp.3.": "linear2.",
        "ln_1.": "norm1.",
        "ln_2.": "norm2.",
    }
    state = {}
    for key, value in block.state_dict().items():
        prefix = next(p for p in renames if key.startswith(p))
        state[renames[prefix] + key.removeprefix(prefix)] = value
    layer.load_state_dict(state, strict=True)
    return layer


def test_encoder_block_parameter_count_equals_transformer_encoder_layer():
    config = vit_config("B/16")
    with torch.device("meta"):
        block = EncoderBlock(config)
        layer = nn.TransformerEncoderLayer(
            768, 12, 3072, dropout=0.0, activation="gelu", batch_first=True, norm_first=True, layer_norm_eps=1e-6
        )
    assert count_parameters(block) == count_parameters(layer) == 7_087_872  # seed 000


@pytest.mark.parametrize("name", ["B/16", "tiny"])
def test_encoder_block_equals_transformer_encoder_layer(name):
    torch.manual_seed(0)
    config = vit_config(name)
    block = EncoderBlock(config)
    perturb_(block)  # biases start at 0 and 1e-6; noise makes every weight count
    layer = transformer_encoder_layer_like(block, config)
    block.eval()
    layer.eval()
    z = torch.randn(2, config.seq_length, config.hidden_dim)
    with torch.inference_mode():
        ours, _ = block(z)
        reference = layer(z)
    assert_close_fp32(ours, reference, terms=config.mlp_dim)


@pytest.mark.parametrize("name", ["tiny", "B/16"])
def test_patch_embedding_is_flattened_patches_times_e(name):
    torch.manual_seed(0)
    config = vit_config(name, num_layers=1)
    model = ViT(config)
    with torch.no_grad():
        model.conv_proj.bias.normal_()  # zero at initialisation; make the "+ b" part observable
    x = images_for(config)
    batch, channels, size, patch = x.shape[0], config.in_channels, config.image_size, config.patch_size
    grid = size // patch
    # (B, C, H, W) -> (B, C, g, P, g, P) -> (B, g, g, C, P, P) -> (B, N, C*P*P): row-major patches,
    # each flattened channel first, the order of the conv weight's (D, C, P, P) layout
    patches = x.reshape(batch, channels, grid, patch, grid, patch).permute(0, 2, 4, 1, 3, 5)
    patches = patches.reshape(batch, grid * grid, channels * patch * patch)
    # E of eq. 1 is (P^2 C) x D; PyTorch stores its transpose, as nn.Linear does
    E = model.conv_proj.weight.reshape(config.hidden_dim, -1).T
    by_hand = patches @ E + model.conv_proj.bias
    with torch.no_grad():
        embedded = model.embed(x)
    assert_close_fp32(embedded[:, 1:], by_hand, terms=patches.shape[-1])
    torch.testing.assert_close(embedded[:, 0], model.class_token[:, 0].expand(batch, -1).detach())


def test_initialisation_matches_torchvision():
    torch.manual_seed(0)
    config = vit_config("B/16", num_layers=1)
    model = ViT(config)
    assert torch.count_nonzero(model.class_token) == 0
    assert torch.count_nonzero(model.heads.head.weight) == 0
    assert torch.count_nonzero(model.heads.head.bias) == 0
    assert model.encoder.pos_embedding.std().item() == pytest.approx(0.02, rel=0.02)
    layer_norms = [m for m in model.modules() if isinstance(m, nn.LayerNorm)]
    assert len(layer_norms) == 2 * config.num_layers + 1
    assert all(m.eps == 1e-6 for m in layer_norms)

    # Every tensor has the spread of torchvision's: same init scheme, up to sampling noise
    # (every tensor here has at least 768 entries, so 10% on the std is > 4 standard errors).
    reference = torchvision_vit_from_config(config).state_dict()
    for key, ours in model.state_dict().items():
        theirs = reference[key]
        assert ours.std().item() == pytest.approx(theirs.std().item(), rel=0.1, abs=1e-8), key
        assert ours.mean().item() == pytest.approx(theirs.mean().item(), abs=0.2 * theirs.std().item() + 1e-8), key


# --- training behaviour ----------------------------------------------------------------------


@pytest.mark.parametrize("pool", ["cls", "mean"])
def test_every_parameter_gets_a_finite_nonzero_gradient(pool):
    torch.manual_seed(0)
    config = vit_config("tiny", num_classes=3, pool=pool)
    model = ViT(config)
    randomise_head_(model)  # a zero head would block the gradient to everything below it
    x, labels = images_for(config, 4), torch.tensor([0, 1, 2, 0])
    logits = model(x)
    assert torch.isfinite(logits).all()
    F.cross_entropy(logits, labels).backward()
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None, name
        assert torch.isfinite(parameter.grad).all(), name
        assert parameter.grad.abs().sum() > 0, name


@pytest.mark.slow
def test_tiny_model_overfits_one_batch():
    torch.manual_seed(0)
    model = ViT(vit_config("tiny", num_classes=3))
    x, labels = images_for(model.config, 8), torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    for _ in range(200):
        optimizer.zero_grad()
        logits = model(x)
        loss = F.cross_entropy(logits, labels)
        loss.backward()
        optimizer.step()
        if loss.item() < 0.05:
            break
    model.eval()
    with torch.no_grad():
        logits = model(x)
    assert F.cross_entropy(logits, labels).item() < 0.05
    assert (logits.argmax(dim=1) == labels).float().mean().item() == 1.0


# --- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        ((2, 1, 32, 32), "expected 3 input channel"),
        ((2, 3, 30, 30), "not divisible by patch size 8"),
        ((2, 3, 48, 48), "built for 32x32"),
        ((3, 32, 32), r"expected images of shape \(B, 3, H, W\)"),
    ],
)
def test_wrong_input_raises_clear_error(shape, message):
    model = ViT(vit_config("tiny"))
    with pytest.raises(ValueError, match=message):
        model(torch.randn(shape))


@pytest.mark.parametrize(
    ("name", "overrides", "message"),
    [
        ("tiny", {"image_size": 30}, "image size 30 is not divisible by patch size 8"),
        ("B/17", {}, "unknown model name 'B/17'"),
        ("tiny", {"num_class": 3}, r"unknown ViTConfig field\(s\) \['num_class'\]"),
    ],
)
def test_bad_config_raises_clear_error(name, overrides, message):
    with pytest.raises(ValueError, match=message):
        vit_config(name, **overrides)


# --- position-embedding interpolation --------------------------------------------------------


def test_interpolated_position_embeddings_run_larger_images():
    torch.manual_seed(0)
    model = ViT(vit_config("tiny", num_classes=3))
    class_position = model.encoder.pos_embedding[:, :1].detach().clone()
    model.interpolate_position_embeddings(48)
    assert model.encoder.pos_embedding.shape == (1, (48 // 8) ** 2 + 1, 32)
    assert torch.equal(model.encoder.pos_embedding[:, :1], class_position)
    logits = model(torch.randn(2, 3, 48, 48))
    assert logits.shape == (2, 3)
    assert torch.isfinite(logits).all()


def test_interpolation_resamples_the_patch_grid_in_2d_row_major_order():
    """Embeddings that vary down the rows of the 4x4 patch grid only (dimension 0: the row, 1: a constant) are
    resampled to a 6x6 grid that varies down its rows only, increasing, and keeps the constant: a swapped or
    flattened reshape would mix rows and columns."""
    model = ViT(vit_config("tiny", num_classes=3))
    rows = torch.arange(4.0).repeat_interleave(4)  # token t sits at row t // 4
    with torch.no_grad():
        model.encoder.pos_embedding.zero_()
        model.encoder.pos_embedding[0, 1:, 0] = rows
        model.encoder.pos_embedding[0, 1:, 1] = 0.7
    model.interpolate_position_embeddings(48)
    grid = model.encoder.pos_embedding.detach()[0, 1:].reshape(6, 6, -1)  # (row, column, dim)
    torch.testing.assert_close(grid[:, :, 0], grid[:, :1, 0].expand(6, 6))  # constant along each row
    assert (grid[1:, 0, 0] > grid[:-1, 0, 0]).all()  # increasing down the columns
    torch.testing.assert_close(grid[:, :, 1], torch.full((6, 6), 0.7))
    assert grid[:, :, 2:].abs().max() == 0


def test_interpolating_to_the_same_size_keeps_the_embedding():
    torch.manual_seed(0)
    model = ViT(vit_config("tiny"))
    before = model.encoder.pos_embedding.detach().clone()
    model.interpolate_position_embeddings(32)
    torch.testing.assert_close(model.encoder.pos_embedding.detach(), before, rtol=0, atol=1e-6)


# --- attention maps, the head split and bf16 -------------------------------------------------


def test_attention_maps_are_row_stochastic():
    torch.manual_seed(0)
    model = ViT(vit_config("tiny")).eval()
    x = images_for(model.config, 3)
    maps = model.attention_maps(x)
    tokens = model.config.seq_length
    assert len(maps) == model.config.num_layers
    for weights in maps:
        assert weights.shape == (3, model.config.num_heads, tokens, tokens)
        assert (weights >= 0).all()
        torch.testing.assert_close(weights.sum(dim=-1), torch.ones(3, model.config.num_heads, tokens))


def test_explicit_attention_equals_scaled_dot_product_attention():
    torch.manual_seed(0)
    model = ViT(vit_config("tiny")).eval()
    perturb_(model, std=0.1)  # sharper attention than at initialisation
    x = images_for(model.config)
    with torch.no_grad():
        tokens = model.embed(x)
        explicit, maps = model.encoder(tokens, need_weights=True)
        fused, _ = model.encoder(tokens)
    assert len(maps) == model.config.num_layers
    assert_close_fp32(explicit, fused, terms=model.config.mlp_dim)


def test_forward_features_then_head_equals_forward():
    torch.manual_seed(0)
    model = ViT(vit_config("tiny", num_classes=3)).eval()
    randomise_head_(model)
    x = images_for(model.config, 4)
    with torch.no_grad():
        features = model.forward_features(x)
        logits = model(x)
        assert features.shape == (4, model.config.hidden_dim)
        assert logits.abs().max() > 0
        torch.testing.assert_close(model.forward_head(features), logits, rtol=0, atol=0)

        model.reset_head(5)
        new_logits = model(x)
    assert new_logits.shape == (4, 5)
    assert model.config.num_classes == 5
    assert torch.count_nonzero(new_logits) == 0  # the fresh head is zero-initialised like torchvision's


def test_bf16_autocast_on_cpu_is_close_to_fp32():
    torch.manual_seed(0)
    model = ViT(vit_config("tiny", num_classes=3))
    randomise_head_(model)
    x = images_for(model.config, 4)
    model.eval()
    with torch.no_grad():
        fp32 = model(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            bf16 = model(x)
    assert bf16.dtype == torch.bfloat16
    assert torch.isfinite(bf16).all()
    # bf16 keeps 8 mantissa bits (~0.4% per rounding); through two layers that stays well under 2%
    torch.testing.assert_close(bf16.float(), fp32, rtol=0, atol=0.02 * fp32.abs().max().item())

    model.train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), torch.tensor([0, 1, 2, 0]))
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())


def test_image_size_not_divisible_by_patch_size_is_a_clear_value_error():
    with pytest.raises(ValueError, match=r"divisible"):
        vit_config("tiny", patch_size=5)
    with pytest.raises(ValueError, match=r"divisible"):
        ViTConfig(image_size=30, patch_size=8, num_layers=1, num_heads=1, hidden_dim=8, mlp_dim=8)
    with pytest.raises(ValueError, match=r"unknown model name 'B/15'; choose one of \["):
        vit_config("B/15")
