"""Throughput of our ViT against torchvision's, on the CPU, in fp32 and bf16 autocast.

Both models are built in the same process with the same weights and timed in alternation
(ours, torchvision, torchvision, ours, ...), so drift in clock speed or background load hits
both alike. Run with ``make bench`` or::

    .venv/bin/python benchmarks/bench_vit.py --model B/16 --batch-size 16 --reps 3

A quick smoke run: ``.venv/bin/python benchmarks/bench_vit.py --model tiny --reps 2``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import time
from collections.abc import Callable

import torch
import torchvision
from torch import nn

from pipeline.models.torchvision_reference import TORCHVISION_BUILDERS, torchvision_vit, torchvision_vit_from_config
from pipeline.models.vit import ViT, vit_config
from pipeline.train.loop import count_parameters

SETTINGS = ("forward fp32", "forward bf16 autocast", "forward+backward fp32", "forward+backward bf16 autocast")


def cpu_name() -> str:
    """The CPU's model name from /proc/cpuinfo, falling back to ``platform.processor()``."""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def machine_report() -> str:
    """One markdown list describing the machine and library versions."""
    uname = platform.uname()
    return "\n".join(
        [
            f"- CPU: {cpu_name()} ({uname.machine}), {os.cpu_count()} logical CPUs, "
            f"torch threads {torch.get_num_threads()}, ATen CPU capability {torch.backends.cpu.get_cpu_capability()}",
            f"- OS: {uname.system} {uname.release}",
            f"- Python {platform.python_version()}, torch {torch.__version__}, torchvision {torchvision.__version__}",
        ]
    )


def make_step(model: nn.Module, setting: str, images: torch.Tensor, labels: torch.Tensor) -> Callable[[], None]:
    """Returns a closure that runs one forward (or one training step) of ``model`` for ``setting``.

    Args:
        model: the network to time.
        setting: one of ``SETTINGS``.
        images: the input batch, (B, C, H, W).
        labels: class indices for the training settings, (B,).
    """
    bf16 = "bf16" in setting
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()

    if setting.startswith("forward+backward"):
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)

        def train_step() -> None:
            model.train()
            optimizer.zero_grad(set_to_none=True)
            # autocast only around the forward pass, as PyTorch's AMP recipe prescribes
            with autocast:
                loss = nn.functional.cross_entropy(model(images), labels)
            loss.backward()
            optimizer.step()

        return train_step

    def forward_step() -> None:
        model.eval()
        with torch.inference_mode(), autocast:
            model(images)

    return forward_step


def time_setting(
    models: dict[str, nn.Module], setting: str, batch_size: int, reps: int, warmup: int
) -> dict[str, list[float]]:
    """Images per second of each model for one setting, one entry per timed repetition.

    The models alternate inside every repetition, and the one that goes first alternates too.
    """
    config = models["ours"].config
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(batch_size, config.in_channels, config.image_size, config.image_size, generator=generator)
    labels = torch.randint(config.num_classes, (batch_size,), generator=generator)
    steps = {name: make_step(model, setting, images, labels) for name, model in models.items()}
    names = list(steps)
    throughput: dict[str, list[float]] = {name: [] for name in names}
    for rep in range(warmup + reps):
        for name in names if rep % 2 == 0 else names[::-1]:
            start = time.perf_counter()
            steps[name]()
            elapsed = time.perf_counter() - start
            if rep >= warmup:
                throughput[name].append(batch_size / elapsed)
    return throughput


def build_models(model_name: str) -> dict[str, nn.Module]:
    """Our ViT and torchvision's for ``model_name``, holding identical weights."""
    torch.manual_seed(0)
    config = vit_config(model_name)
    if model_name in TORCHVISION_BUILDERS:
        reference = torchvision_vit(model_name)
    else:
        reference = torchvision_vit_from_config(config)
    ours = ViT(config)
    ours.load_state_dict(reference.state_dict(), strict=True)
    return {"ours": ours, "torchvision": reference}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="B/16", help="preset name from pipeline.models.vit.PRESETS (default B/16)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--reps", type=int, default=3, help="timed repetitions per model and setting")
    parser.add_argument("--warmup", type=int, default=1, help="untimed repetitions per model and setting")
    args = parser.parse_args()

    models = build_models(args.model)
    config = models["ours"].config
    print(machine_report())
    print(
        f"- Model {args.model} ({count_parameters(models['ours']):,} parameters), batch {args.batch_size} "
        f"at {config.image_size}x{config.image_size}, {args.warmup} warm-up + {args.reps} timed reps each, "
        "median reported\n",
        flush=True,
    )
    print("| setting | ours img/s | torchvision img/s | ours/torchvision | per-rep ratio range |")
    print("|---|---:|---:|---:|---:|")
    for setting in SETTINGS:
        throughput = time_setting(models, setting, args.batch_size, args.reps, args.warmup)
        ours = statistics.median(throughput["ours"])
        reference = statistics.median(throughput["torchvision"])
        # ours and torchvision's reps of the same round ran back to back, so their ratio shows the noise
        ratios = [o / r for o, r in zip(throughput["ours"], throughput["torchvision"], strict=True)]
        spread = f"{min(ratios):.2f}-{max(ratios):.2f}"
        print(f"| {setting} | {ours:.2f} | {reference:.2f} | {ours / reference:.2f} | {spread} |", flush=True)


if __name__ == "__main__":
    main()
