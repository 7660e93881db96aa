"""A small ResNet of about the offline ViT's size: the inductive-bias baseline of the data-hunger curve
(arm ``cnn``) and of the pretraining-size axis (``pipeline.pretrain.size_axis``).

The paper's explanation of data hunger (section 4.2): a ViT has "much less image-specific inductive
bias than CNNs" (locality, translation equivariance), so it must learn them from data. A CNN of the
same size trained the same way shows how much of the gap is architecture rather than data.

Built from torchvision's ``BasicBlock`` (He et al. 2016, two 3x3 convolutions with batch norm and an
identity or 1x1 projection shortcut), one block per stage. For small images the stem is a single 3x3
convolution of stride 2 (no 7x7 convolution, no max pooling), so a 28x28 input runs its stages at
14, 7, 4 and 2 pixels. With widths (32, 64, 128, 256) and three classes it has 1,226,595
parameters, within 3% of the offline ViT's 1,198,979.
"""

from __future__ import annotations

import torch
from torch import nn


def _stage(in_channels: int, out_channels: int, stride: int) -> nn.Module:
    # Imported here: torchvision.models takes 1.2 s to import, paid by every sweep process otherwise.
    from torchvision.models.resnet import BasicBlock, conv1x1

    shortcut = None
    if stride != 1 or in_channels != out_channels:
        shortcut = nn.Sequential(conv1x1(in_channels, out_channels, stride), nn.BatchNorm2d(out_channels))
    return BasicBlock(in_channels, out_channels, stride, downsample=shortcut)


NHWC_MIN_CHANNELS = 8  # oneDNN's AVX2 block of fp32 channels


def small_resnet(in_channels: int, num_classes: int, widths: tuple[int, ...] = (32, 64, 128, 256)) -> nn.Sequential:
    """(B, in_channels, H, W) -> (B, num_classes); each stage after the first halves H and W.

    Initialisation follows torchvision's ResNet defaults: Kaiming-normal (fan out) convolutions,
    batch-norm weight 1 and bias 0, the linear head as ``nn.Linear`` makes it.
    """
    if not widths or min(widths) < 1 or in_channels < 1 or num_classes < 1:
        raise ValueError(f"small_resnet needs positive sizes, got {in_channels=}, {num_classes=}, {widths=}")
    layers: list[nn.Module] = [
        nn.Conv2d(in_channels, widths[0], kernel_size=3, stride=2, padding=1, bias=False),
        nn.BatchNorm2d(widths[0]),
        nn.ReLU(inplace=True),
    ]
    previous = widths[0]
    for index, width in enumerate(widths):
        layers.append(_stage(previous, width, stride=1 if index == 0 else 2))
        previous = width
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(previous, num_classes)]
    model = nn.Sequential(*layers)
    for module in model.modules():
        if isinstance(module, nn.Conv2d):
            nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(module, nn.BatchNorm2d):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
    # Channels-last weights: oneDNN then runs every convolution (and its batch norm) in NHWC, whatever the layout
    # of the input, faster on a CPU in either precision (docs/benchmark.md). Not
    # below 8 channels: there, with torch 2.14.1 on an AVX2-only CPU, the backward pass of a strided 1x1
    # convolution in NHWC writes past its buffer (a crash, or a hang in the next parallel region).
    if min(widths) < NHWC_MIN_CHANNELS:
        return model
    return model.to(memory_format=torch.channels_last)
