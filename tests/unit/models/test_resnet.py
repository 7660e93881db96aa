"""The small ResNet baseline: its size against the offline ViT, shapes, gradients, and that it can learn."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from helpers import params_with

from pipeline.models.resnet import small_resnet
from pipeline.models.vit import ViT, vit_config
from pipeline.train.loop import count_parameters


def test_default_widths_give_about_the_offline_vits_parameter_count():
    widths = tuple(params_with().data_hunger.cnn_widths)
    cnn = small_resnet(in_channels=1, num_classes=3, widths=widths)
    vit = ViT(vit_config("fmnist", num_classes=3))
    assert count_parameters(cnn) == 1_226_595 and count_parameters(vit) == 1_198_979
    assert abs(count_parameters(cnn) / count_parameters(vit) - 1) < 0.03


@pytest.mark.parametrize(("channels", "size"), [(1, 28), (3, 224), (3, 32)])
def test_logits_shape_for_grey_and_colour_inputs_of_any_size(channels, size):
    """(B, C, H, W) -> (B, 5), and before the pooling the stem and each stage after the first halve the grid
    (28 px: 14, 14, 7, 4), so a stage that stopped downsampling shows though the logits' shape would not."""
    model = small_resnet(channels, num_classes=5, widths=(4, 8, 16))
    images = torch.randn(2, channels, size, size)
    assert model(images).shape == (2, 5)
    grid = math.ceil(math.ceil(math.ceil(size / 2) / 2) / 2)  # the stem's stride 2, then stages 2 and 3
    assert model[:-3](images).shape == (2, 16, grid, grid)  # every layer before the pooling, flatten and head


def test_every_parameter_gets_a_gradient():
    model = small_resnet(1, num_classes=3, widths=(4, 8))
    F.cross_entropy(model(torch.randn(4, 1, 28, 28)), torch.tensor([0, 1, 2, 0])).backward()
    missing = [name for name, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert not missing


@pytest.mark.slow
def test_overfits_one_batch():
    torch.manual_seed(0)
    model = small_resnet(1, num_classes=3, widths=(8, 16))
    images, labels = torch.randn(12, 1, 28, 28), torch.arange(3).repeat(4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(60):
        loss = F.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.05
    model.eval()
    assert (model(images).argmax(1) == labels).all()


@pytest.mark.parametrize("kwargs", [{"widths": ()}, {"widths": (8, 0)}, {"num_classes": 0}, {"in_channels": 0}])
def test_rejects_non_positive_sizes(kwargs):
    arguments = {"in_channels": 1, "num_classes": 3, "widths": (8,)} | kwargs
    with pytest.raises(ValueError, match="positive sizes"):
        small_resnet(**arguments)


def test_a_narrow_resnet_trains_at_the_paper_size_and_the_default_one_runs_channels_last():
    """Widths under 8 stay in torch's default layout: in NHWC, on an AVX2-only CPU with torch 2.14.1, the backward
    pass of the 4 -> 8 strided 1x1 shortcut at 224 px wrote past its buffer (a segfault, "free(): invalid next
    size", or a hang of the next step). A fresh process, so that a corrupted heap shows as its exit status."""
    import subprocess
    import sys

    step = (
        "import torch; from pipeline.models.resnet import small_resnet\n"
        "torch.set_num_threads(2); torch.manual_seed(0)\n"
        "model = small_resnet(3, 3, widths=(4, 8))\n"
        "for _ in range(3): model(torch.randn(4, 3, 224, 224)).sum().backward()\n"
        "print('trained')"
    )
    done = subprocess.run([sys.executable, "-c", step], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout.strip()) == (0, "trained"), done.stderr[-2000:]
    narrow = small_resnet(3, 3, widths=(4, 8))
    default = small_resnet(1, 3, widths=tuple(params_with().data_hunger.cnn_widths))
    assert not narrow[0].weight.is_contiguous(memory_format=torch.channels_last)
    assert default[0].weight.is_contiguous(memory_format=torch.channels_last)
