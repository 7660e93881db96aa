"""The Vision Transformer of Dosovitskiy et al. (2020), "An Image is Worth 16x16 Words".

One file, in the spirit of torchvision's ``vision_transformer.py`` and nanoGPT's ``model.py``.
Parameter names and initialisation match ``torchvision.models.VisionTransformer``, so its
state dicts load into :class:`ViT` with ``strict=True`` (and ours into it) and give the same
logits. The four equations of Section 3.1, with ``N = HW / P^2`` patches of size ``P``:

    (1)  z_0  = [x_class; x_p^1 E; ...; x_p^N E] + E_pos,   E in R^{(P^2 C) x D}, E_pos in R^{(N+1) x D}
    (2)  z'_l = MSA(LN(z_{l-1})) + z_{l-1},                 l = 1 ... L
    (3)  z_l  = MLP(LN(z'_l)) + z'_l,                       l = 1 ... L
    (4)  y    = LN(z_L^0)

A linear head on ``y`` gives the logits. Table 1 (model variants):

    Model      Layers L  Hidden D  MLP size  Heads  Params
    ViT-Base   12        768       3072      12     86M
    ViT-Large  24        1024      4096      16     307M
    ViT-Huge   32        1280      5120      16     632M
"""

from __future__ import annotations

import dataclasses
import math
from collections import OrderedDict
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

POOLS = ("cls", "mean")


@dataclass(frozen=True)
class ViTConfig:
    """Sizes of one ViT; field names follow torchvision's ``VisionTransformer`` arguments."""

    image_size: int = 224
    patch_size: int = 16
    num_layers: int = 12  # L, Table 1
    num_heads: int = 12  # heads, Table 1
    hidden_dim: int = 768  # D, Table 1
    mlp_dim: int = 3072  # MLP size, Table 1
    num_classes: int = 1000
    in_channels: int = 3
    dropout: float = 0.0  # Appendix B.1: after the position embeddings and after every dense layer
    attention_dropout: float = 0.0
    # torchvision also drops out the attention block's output (its out_proj is a dense layer);
    # seed 000's code does not, so its replication turns this off.
    dropout_after_attention: bool = True
    pool: str = "cls"  # "cls": token 0 as in eq. 4; "mean": mean of patch tokens (seeds 002/003)

    def __post_init__(self) -> None:
        for name in ("image_size", "patch_size", "num_layers", "num_heads", "hidden_dim", "mlp_dim"):
            if getattr(self, name) < 1:
                raise ValueError(f"ViTConfig.{name} must be a positive integer, got {getattr(self, name)}")
        if self.num_classes < 1 or self.in_channels < 1:
            raise ValueError("ViTConfig.num_classes and in_channels must be positive integers")
        if self.image_size % self.patch_size:
            raise ValueError(
                f"image size {self.image_size} is not divisible by patch size {self.patch_size}; "
                f"choose an image size that is a multiple of {self.patch_size}"
            )
        if self.hidden_dim % self.num_heads:
            raise ValueError(f"hidden_dim {self.hidden_dim} is not divisible by num_heads {self.num_heads}")
        if self.pool not in POOLS:
            raise ValueError(f"pool must be one of {POOLS}, got {self.pool!r}")
        for name in ("dropout", "attention_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"ViTConfig.{name} must be in [0, 1), got {getattr(self, name)}")

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2

    @property
    def seq_length(self) -> int:
        return self.num_patches + 1


PRESETS: dict[str, dict] = {
    # Table 1, at the 224x224 resolution torchvision builds them with.
    "B/16": dict(patch_size=16, num_layers=12, num_heads=12, hidden_dim=768, mlp_dim=3072),
    "B/32": dict(patch_size=32, num_layers=12, num_heads=12, hidden_dim=768, mlp_dim=3072),
    "L/16": dict(patch_size=16, num_layers=24, num_heads=16, hidden_dim=1024, mlp_dim=4096),
    "L/32": dict(patch_size=32, num_layers=24, num_heads=16, hidden_dim=1024, mlp_dim=4096),
    "H/14": dict(patch_size=14, num_layers=32, num_heads=16, hidden_dim=1280, mlp_dim=5120),
    # Seed 000's CPU model: ViT-Tiny widths, 12 layers, 32x32 patches (50 tokens).
    "seed-small": dict(patch_size=32, num_layers=12, num_heads=3, hidden_dim=192, mlp_dim=768),
    # For the offline experiment: 28x28 grey Fashion-MNIST, 7x7 patches (16 + 1 tokens).
    "fmnist": dict(
        image_size=28,
        in_channels=1,
        patch_size=7,
        num_layers=6,
        num_heads=4,
        hidden_dim=128,
        mlp_dim=512,
    ),
    # Unit tests: fast enough to train for a few steps inside a test.
    "tiny": dict(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64),
}


def vit_config(name: str, **overrides) -> ViTConfig:
    """Returns a preset config, with fields replaced by ``overrides``.

    Args:
        name: one of ``PRESETS`` ("B/16", "B/32", "L/16", "L/32", "H/14", "seed-small",
            "fmnist", "tiny").
        **overrides: any :class:`ViTConfig` field, e.g. ``num_classes=3``.
    """
    if name not in PRESETS:
        raise ValueError(f"unknown model name {name!r}; choose one of {sorted(PRESETS)}")
    unknown = set(overrides) - {f.name for f in dataclasses.fields(ViTConfig)}
    if unknown:
        raise ValueError(f"unknown ViTConfig field(s) {sorted(unknown)}")
    return ViTConfig(**{**PRESETS[name], **overrides})


class SelfAttention(nn.Module):
    """Multi-head self-attention (MSA, eq. 2) with ``nn.MultiheadAttention``'s parameter names."""

    def __init__(self, hidden_dim: int, num_heads: int, attention_dropout: float = 0.0):
        super().__init__()
        self.num_heads = num_heads
        self.attention_dropout = attention_dropout
        # Packed q, k, v projections, named and initialised as in nn.MultiheadAttention.
        self.in_proj_weight = nn.Parameter(torch.empty(3 * hidden_dim, hidden_dim))
        self.in_proj_bias = nn.Parameter(torch.empty(3 * hidden_dim))
        self.out_proj = nn.Linear(hidden_dim, hidden_dim)
        nn.init.xavier_uniform_(self.in_proj_weight)
        nn.init.zeros_(self.in_proj_bias)
        nn.init.zeros_(self.out_proj.bias)

    def forward(self, x: torch.Tensor, need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        batch, tokens, dim = x.shape
        head_dim = dim // self.num_heads
        # (B, N, D) -> (B, N, 3D) -> (B, N, 3, h, D/h) -> (3, B, h, N, D/h)
        qkv = F.linear(x, self.in_proj_weight, self.in_proj_bias)
        q, k, v = qkv.view(batch, tokens, 3, self.num_heads, head_dim).permute(2, 0, 3, 1, 4)
        dropout_p = self.attention_dropout if self.training else 0.0
        # PyTorch's fused CPU kernel is several times slower than the plain product in bf16 (docs/benchmark.md),
        # so it is skipped there.
        spelled_out = need_weights or (q.dtype == torch.bfloat16 and q.device.type == "cpu")
        if spelled_out:
            # softmax(q k^T / sqrt(D/h)): (B, h, N, N)
            weights = torch.softmax((q @ k.transpose(-2, -1)) * head_dim**-0.5, dim=-1)
            out = F.dropout(weights, dropout_p, self.training) @ v
        else:
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p)
        # (B, h, N, D/h) -> (B, N, h, D/h) -> (B, N, D)
        out = out.transpose(1, 2).reshape(batch, tokens, dim)
        return self.out_proj(out), (weights if need_weights else None)


class MLPBlock(nn.Sequential):
    """The MLP of eq. 3: two linear layers with a GELU, as torchvision's ``MLPBlock``."""

    def __init__(self, hidden_dim: int, mlp_dim: int, dropout: float):
        super().__init__(
            nn.Linear(hidden_dim, mlp_dim),
            nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(mlp_dim, hidden_dim),
            nn.Dropout(dropout),
        )
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                nn.init.normal_(module.bias, std=1e-6)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # torchvision's published ViT checkpoints predate its rename of the MLP's layers: they hold
        # mlp.linear_1.* / mlp.linear_2.*, which torchvision itself still maps to mlp.0.* / mlp.3.*.
        for legacy, current in (("linear_1", "0"), ("linear_2", "3")):
            for kind in ("weight", "bias"):
                old_key = f"{prefix}{legacy}.{kind}"
                if old_key in state_dict:
                    state_dict[f"{prefix}{current}.{kind}"] = state_dict.pop(old_key)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


class EncoderBlock(nn.Module):
    """One pre-norm Transformer encoder block: equations 2 and 3 with their residuals."""

    def __init__(self, config: ViTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.hidden_dim, eps=1e-6)
        self.self_attention = SelfAttention(config.hidden_dim, config.num_heads, config.attention_dropout)
        self.dropout = nn.Dropout(config.dropout if config.dropout_after_attention else 0.0)
        self.ln_2 = nn.LayerNorm(config.hidden_dim, eps=1e-6)
        self.mlp = MLPBlock(config.hidden_dim, config.mlp_dim, config.dropout)

    def forward(self, x: torch.Tensor, need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        attended, weights = self.self_attention(self.ln_1(x), need_weights)
        x = self.dropout(attended) + x  # eq. 2
        x = self.mlp(self.ln_2(x)) + x  # eq. 3
        return x, weights


class Encoder(nn.Module):
    """Position embeddings (eq. 1), L encoder blocks and the final LayerNorm (eq. 4)."""

    def __init__(self, config: ViTConfig):
        super().__init__()
        self.pos_embedding = nn.Parameter(torch.empty(1, config.seq_length, config.hidden_dim).normal_(std=0.02))
        self.dropout = nn.Dropout(config.dropout)
        self.layers = nn.Sequential(
            OrderedDict((f"encoder_layer_{i}", EncoderBlock(config)) for i in range(config.num_layers))
        )
        self.ln = nn.LayerNorm(config.hidden_dim, eps=1e-6)

    def forward(self, x: torch.Tensor, need_weights: bool = False) -> tuple[torch.Tensor, list[torch.Tensor]]:
        x = self.dropout(x + self.pos_embedding)
        attention = []
        for layer in self.layers:
            x, weights = layer(x, need_weights)
            if need_weights:
                attention.append(weights)
        return self.ln(x), attention


class ViT(nn.Module):
    """Vision Transformer: equations 1-4 and a linear head, loadable from torchvision's weights."""

    def __init__(self, config: ViTConfig):
        super().__init__()
        self.config = config
        # E of eq. 1 as a convolution with kernel = stride = P: one matrix applied to every patch.
        self.conv_proj = nn.Conv2d(config.in_channels, config.hidden_dim, config.patch_size, config.patch_size)
        self.class_token = nn.Parameter(torch.zeros(1, 1, config.hidden_dim))
        self.encoder = Encoder(config)
        self.heads = nn.Sequential(OrderedDict(head=nn.Linear(config.hidden_dim, config.num_classes)))

        fan_in = config.in_channels * config.patch_size**2
        nn.init.trunc_normal_(self.conv_proj.weight, std=math.sqrt(1 / fan_in))
        nn.init.zeros_(self.conv_proj.bias)
        nn.init.zeros_(self.heads.head.weight)
        nn.init.zeros_(self.heads.head.bias)

    def _check_input(self, x: torch.Tensor) -> None:
        c = self.config
        if x.ndim != 4:
            raise ValueError(f"expected images of shape (B, {c.in_channels}, H, W), got shape {tuple(x.shape)}")
        if x.shape[1] != c.in_channels:
            raise ValueError(
                f"expected {c.in_channels} input channel(s), got {x.shape[1]}; "
                "convert the images (e.g. grey <-> RGB) or build the model with in_channels set"
            )
        height, width = x.shape[-2:]
        for side in (height, width):
            if side % c.patch_size:
                raise ValueError(
                    f"image size {height}x{width} is not divisible by patch size {c.patch_size}; "
                    f"resize the images to {c.image_size}x{c.image_size}"
                )
        if (height, width) != (c.image_size, c.image_size):
            raise ValueError(
                f"got {height}x{width} images but the model was built for {c.image_size}x{c.image_size}; "
                "resize the images, or call interpolate_position_embeddings(new_size)"
            )

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """Patch embedding plus class token (eq. 1, before position embeddings): (B, N+1, D)."""
        self._check_input(x)
        # (B, C, H, W) -> (B, D, H/P, W/P) -> (B, D, N) -> (B, N, D)
        x = self.conv_proj(x).flatten(2).transpose(1, 2)
        # (1, 1, D) -> (B, 1, D), then (B, N+1, D)
        return torch.cat([self.class_token.expand(x.shape[0], -1, -1), x], dim=1)

    def _pool(self, z: torch.Tensor) -> torch.Tensor:
        # (B, N+1, D) -> (B, D)
        return z[:, 0] if self.config.pool == "cls" else z[:, 1:].mean(dim=1)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """The normalised class token y of eq. 4 (or the mean patch token): (B, D)."""
        z, _ = self.encoder(self.embed(x))
        return self._pool(z)

    def forward_head(self, features: torch.Tensor) -> torch.Tensor:
        """Logits from pooled features: (B, D) -> (B, num_classes)."""
        return self.heads(features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))

    @torch.no_grad()
    def attention_maps(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Softmax attention weights of every layer, each (B, heads, N+1, N+1)."""
        _, attention = self.encoder(self.embed(x), need_weights=True)
        return attention

    def reset_head(self, num_classes: int) -> None:
        """Replaces the head with a new zero-initialised linear layer for ``num_classes`` classes."""
        head = nn.Linear(self.config.hidden_dim, num_classes).to(self.heads.head.weight)
        nn.init.zeros_(head.weight)
        nn.init.zeros_(head.bias)
        self.heads.head = head
        self.config = dataclasses.replace(self.config, num_classes=num_classes)

    @torch.no_grad()
    def interpolate_position_embeddings(self, new_image_size: int) -> None:
        """Resizes the learned position embeddings for another input size (seed 003; paper Sec. 3.2).

        The patch-grid embeddings are resampled bicubically in 2D; the class-token embedding is kept.

        Args:
            new_image_size: the new square input size, a multiple of the patch size.
        """
        new_config = dataclasses.replace(self.config, image_size=new_image_size)
        old_grid = self.config.image_size // self.config.patch_size
        new_grid = new_image_size // self.config.patch_size
        pos = self.encoder.pos_embedding
        cls_pos, grid_pos = pos[:, :1], pos[:, 1:]
        # (1, N, D) -> (1, g, g, D) -> (1, D, g, g) -> (1, D, g', g') -> (1, g'^2, D)
        grid_pos = grid_pos.reshape(1, old_grid, old_grid, -1).permute(0, 3, 1, 2)
        grid_pos = F.interpolate(grid_pos, size=(new_grid, new_grid), mode="bicubic", align_corners=False)
        grid_pos = grid_pos.permute(0, 2, 3, 1).reshape(1, new_grid * new_grid, -1)
        self.encoder.pos_embedding = nn.Parameter(torch.cat([cls_pos, grid_pos], dim=1))
        self.config = new_config


def state_dict_mismatch(model: nn.Module, state: dict[str, torch.Tensor], shown: int = 3) -> str:
    """The first keys by which ``state`` fails to fit ``model`` (missing, unexpected, wrong shape), in one line.

    torchvision's legacy MLP names (``mlp.linear_1``/``mlp.linear_2``) are not counted: they load."""
    legacy = {".mlp.linear_1.": ".mlp.0.", ".mlp.linear_2.": ".mlp.3."}

    def current(key: str) -> str:
        for old, new in legacy.items():
            key = key.replace(old, new)
        return key

    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    given = {current(k): tuple(v.shape) for k, v in state.items() if isinstance(v, torch.Tensor)}
    parts = []
    missing = [k for k in expected if k not in given]
    unexpected = [k for k in given if k not in expected]
    wrong = [f"{k} {given[k]} vs {expected[k]}" for k in expected if k in given and given[k] != expected[k]]
    for label, keys in (("missing", missing), ("unexpected", unexpected), ("wrong shape", wrong)):
        if keys:
            more = f" and {len(keys) - shown} more" if len(keys) > shown else ""
            parts.append(f"{len(keys)} {label}: {', '.join(keys[:shown])}{more}")
    return "; ".join(parts) or "no key differs"
