"""How much of the machine the training core uses: achieved GFLOP/s of one training step of every model the
pipeline trains, as a fraction of the matmul ceiling measured in the same process.

The ceiling is a plain ``a @ b`` at 1024^2 and at the offline ViT's own largest shape (tokens x 128 @ 128 x 512,
the MLP's first layer), fp32 and, where the CPU runs it natively, bf16. A step's FLOPs are counted by
``torch.utils.flop_counter.FlopCounterMode`` (matmuls, convolutions and attention, forward and backward; the
element-wise work is not counted, so the fraction is of useful matmul work). Each step is timed ``--reps``
times after two warm-ups and reported as its median. Run with ``make bench-efficiency`` or::

    .venv/bin/python benchmarks/efficiency.py --reps 10 [--profile]

``--profile`` prints ``torch.profiler``'s top operators of one offline-ViT step (batch 64, fp32), where the time
outside the matmuls hides. Time it on an idle machine: another torch process on the same cores halves
everything.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from pipeline.models.resnet import small_resnet
from pipeline.models.vit import ViT, vit_config
from pipeline.pretrain.masked_prediction import MaskedPatchModel
from pipeline.train import runtime as runtime_module
from pipeline.train.optim import Adam

CNN_WIDTHS = (32, 64, 128, 256)  # params.yaml data_hunger.cnn_widths


def median_seconds(fn: Callable[[], object], reps: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def matmul_gflops(m: int, k: int, n: int, dtype: torch.dtype, reps: int) -> float:
    a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
    return 2 * m * k * n / median_seconds(lambda: a @ b, reps * 3) / 1e9


def training_step(name: str, batch: int, precision: str, channels_last: bool = False):
    """(step closure, FLOPs of one step) for one of the pipeline's models."""
    generator = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    images = torch.randn(batch, 1, 28, 28, generator=generator)
    if name == "vit":
        model = ViT(vit_config("fmnist", num_classes=3))
        labels = torch.randint(0, 3, (batch,), generator=generator)

        def loss_of() -> torch.Tensor:
            return F.cross_entropy(model(images).float(), labels)
    elif name == "resnet":
        model = small_resnet(1, 3, CNN_WIDTHS)  # channels-last weights, as the pipeline trains it
        labels = torch.randint(0, 3, (batch,), generator=generator)
        if not channels_last:  # the layout it had before: NCHW weights
            model = model.to(memory_format=torch.contiguous_format)

        def loss_of() -> torch.Tensor:
            return F.cross_entropy(model(images).float(), labels)
    else:  # masked patch prediction: the backbone's pretraining objective
        model = MaskedPatchModel(ViT(vit_config("fmnist", num_classes=10, pool="mean")), bits=3)
        pixels = torch.randint(0, 256, (batch, 1, 28, 28), dtype=torch.uint8, generator=generator)
        images = (pixels.float() / 255 - 0.286) / 0.353

        def loss_of() -> torch.Tensor:
            return model.loss(images, pixels, 0.5, generator)[0]

    optimizer = Adam(list(model.parameters()), lr=1e-4, decoupled=True)  # the pipeline's AdamW

    def step() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = loss_of()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    counter = FlopCounterMode(display=False)
    with counter:
        step()
    return step, counter.get_total_flops()


MODELS = [("vit", 64, False), ("vit", 256, False), ("resnet", 64, False), ("resnet", 64, True),
          ("masked_patch", 256, False)]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=10, help="timed steps per row (default 10)")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (params.yaml runtime.threads)")
    parser.add_argument("--profile", action="store_true", help="also print the profiler's top operators")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    features = runtime_module.cpu_bf16_features()
    native = bool(features)
    precisions = ["fp32", "bf16"] if native else ["fp32"]
    print(f"CPU: {runtime_module.cpu_name()}, ATen {runtime_module.cpu_capability()}, bf16 features: "
          f"{'+'.join(features) or 'none (bf16 emulated: not timed)'}; torch {torch.__version__}, "
          f"{args.threads} threads\n")  # fmt: skip
    ceilings = {}
    print("| matmul | precision | GFLOP/s |\n|---|---|---:|")
    for precision in precisions:
        dtype = torch.float32 if precision == "fp32" else torch.bfloat16
        for label, shape in (("1024x1024 @ 1024x1024", (1024, 1024, 1024)), ("1088x128 @ 128x512", (1088, 128, 512)),
                             ("4352x128 @ 128x512", (4352, 128, 512))):  # fmt: skip
            ceilings[precision, label] = matmul_gflops(*shape, dtype, args.reps)
            print(f"| {label} | {precision} | {ceilings[precision, label]:.1f} |")
    print("\n| model | batch | precision | ms/step | GFLOP/step | GFLOP/s | of 1024^2 | of own shape |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    for name, batch, channels_last in MODELS:
        for precision in precisions:
            step, flops = training_step(name, batch, precision, channels_last)
            seconds = median_seconds(step, args.reps)
            achieved = flops / seconds / 1e9
            own = ceilings[precision, "4352x128 @ 128x512" if batch == 256 else "1088x128 @ 128x512"]
            label = name + (" channels_last" if channels_last else "")
            square = achieved / ceilings[precision, "1024x1024 @ 1024x1024"]
            print(f"| {label} | {batch} | {precision} | {seconds * 1e3:.1f} | {flops / 1e9:.2f} | {achieved:.1f} | "
                  f"{square:.0%} | {achieved / own:.0%} |")  # fmt: skip
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        step, _ = training_step("vit", 64, "fp32")
        for _ in range(3):
            step()
        with profile(activities=[ProfilerActivity.CPU]) as profiler:
            for _ in range(10):
                step()
        print("\nTop operators of 10 offline-ViT training steps (batch 64, fp32), by self CPU time:\n")
        print(profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=15, max_name_column_width=45))


if __name__ == "__main__":
    main()
