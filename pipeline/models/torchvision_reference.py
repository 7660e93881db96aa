"""torchvision's own ViT builders, the reference our model is checked against (tests/unit/models/test_vit.py,
benchmarks/bench_vit.py). No stage imports this module."""

from __future__ import annotations

from torch import nn

from pipeline.models.vit import ViTConfig

# Table 1 name -> torchvision builder, for the parity tests and the pretrained backbone.
TORCHVISION_BUILDERS = {
    "B/16": "vit_b_16",
    "B/32": "vit_b_32",
    "L/16": "vit_l_16",
    "L/32": "vit_l_32",
    "H/14": "vit_h_14",
}


def torchvision_vit(name: str, **kwargs) -> nn.Module:
    """Builds torchvision's ViT for a Table 1 name ("B/16", ...), with ``weights=None`` unless given."""
    import torchvision

    if name not in TORCHVISION_BUILDERS:
        raise ValueError(f"torchvision has no ViT {name!r}; it has {sorted(TORCHVISION_BUILDERS)}")
    kwargs.setdefault("weights", None)
    return getattr(torchvision.models, TORCHVISION_BUILDERS[name])(**kwargs)


def torchvision_vit_from_config(config: ViTConfig) -> nn.Module:
    """torchvision's ``VisionTransformer`` with the same sizes as ``config`` (3 channels, CLS pooling)."""
    from torchvision.models.vision_transformer import VisionTransformer

    if config.in_channels != 3 or config.pool != "cls":
        raise ValueError("torchvision's VisionTransformer supports only 3 channels and CLS pooling")
    return VisionTransformer(
        image_size=config.image_size,
        patch_size=config.patch_size,
        num_layers=config.num_layers,
        num_heads=config.num_heads,
        hidden_dim=config.hidden_dim,
        mlp_dim=config.mlp_dim,
        dropout=config.dropout,
        attention_dropout=config.attention_dropout,
        num_classes=config.num_classes,
    )
