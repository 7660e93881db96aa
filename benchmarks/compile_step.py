"""Does ``torch.compile`` pay on the curve's training step? Eager against compiled, in one process, on the offline
ViT and the small ResNet at the curve's batch (64), fp32 and, where the CPU runs it natively, bf16.

A step is what the sweeps run: the forward under autocast, cross-entropy, backward and the pipeline's AdamW.
Eager and compiled steps alternate, ``--reps`` of each after the warm-ups, so a load that comes and goes slows
both; the table gives each median and their ratio (eager / compiled: above 1, compiling is faster), and the
seconds of the first compiled step (tracing and inductor's code generation). That first compile is then timed
again in a fresh process against the same on-disk inductor cache (``--cache-dir``, empty at the start unless
given), as a second stage process of a repro would find it. Run it on an idle machine::

    .venv/bin/python benchmarks/compile_step.py --reps 30

A run of the curve trains a few hundred to a few thousand steps, so a compile of tens of seconds per stage
process must be repaid by the per-step gain over that process's steps (the printed break-even).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from pipeline.models.resnet import small_resnet  # noqa: E402
from pipeline.models.vit import ViT, vit_config  # noqa: E402
from pipeline.train import runtime as runtime_module  # noqa: E402
from pipeline.train.optim import Adam  # noqa: E402

CNN_WIDTHS = (32, 64, 128, 256)  # params.yaml data_hunger.cnn_widths
BATCH = 64  # params.yaml data_hunger.batch_size


def build(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return ViT(vit_config("fmnist", num_classes=3)) if name == "vit" else small_resnet(1, 3, CNN_WIDTHS)


def step_of(model: torch.nn.Module, forward, precision: str):
    """One training step of ``model`` through ``forward`` (the model itself, or its compiled form)."""
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(BATCH, 1, 28, 28, generator=generator)
    labels = torch.randint(0, 3, (BATCH,), generator=generator)
    optimizer = Adam(list(model.parameters()), lr=1e-4, decoupled=True)

    def step() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = F.cross_entropy(forward(images).float(), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    return step


def first_compile_seconds(name: str, precision: str) -> float:
    model = build(name)
    step = step_of(model, torch.compile(model), precision)
    started = time.perf_counter()
    step()
    return time.perf_counter() - started


def compare(name: str, precision: str, reps: int) -> dict:
    eager_model, compiled_model = build(name), build(name)
    eager = step_of(eager_model, eager_model, precision)
    compiled_step = step_of(compiled_model, torch.compile(compiled_model), precision)
    started = time.perf_counter()
    compiled_step()
    first = time.perf_counter() - started
    for _ in range(3):
        eager()
        compiled_step()
    times: dict[str, list[float]] = {"eager": [], "compiled": []}
    for _ in range(reps):
        for label, fn in (("eager", eager), ("compiled", compiled_step)):
            started = time.perf_counter()
            fn()
            times[label].append(time.perf_counter() - started)
    eager_s, compiled_s = (statistics.median(times[k]) for k in ("eager", "compiled"))
    return {"eager_ms": eager_s * 1e3, "compiled_ms": compiled_s * 1e3, "ratio": eager_s / compiled_s,
            "first_compile_s": first}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=30, help="timed steps of each kind per row (default 30)")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (params.yaml runtime.threads)")
    parser.add_argument("--cache-dir", help="inductor's on-disk cache (default: a new empty folder)")
    parser.add_argument("--json", help="also write the rows and the machine to this file (metrics/compile_step.json)")
    parser.add_argument("--first-only", nargs=2, metavar=("MODEL", "PRECISION"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.first_only:  # the child: one first compile against the cache its parent filled
        print(json.dumps(first_compile_seconds(*args.first_only)))
        return
    cache = args.cache_dir or tempfile.mkdtemp(prefix="inductor-cache-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache  # before the first compile reads it
    features = runtime_module.cpu_bf16_features()
    precisions = ["fp32", "bf16"] if features else ["fp32"]
    print(f"CPU: {runtime_module.cpu_name()}, ATen {runtime_module.cpu_capability()}, bf16 features: "
          f"{'+'.join(features) or 'none (bf16 emulated: not timed)'}; torch {torch.__version__}, "
          f"{args.threads} threads, batch {BATCH}, inductor cache {cache}\n")  # fmt: skip
    print(
        "| model | precision | eager ms/step | compiled ms/step | eager / compiled | first compile s | first "
        "compile s, warm cache, new process | break-even steps |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    rows = []
    for name in ("vit", "resnet"):
        for precision in precisions:
            row = compare(name, precision, args.reps)
            child = subprocess.run([sys.executable, __file__, "--threads", str(args.threads), "--first-only", name,
                                    precision], env=os.environ | {"TORCHINDUCTOR_CACHE_DIR": cache},
                                   capture_output=True, text=True, check=True)  # fmt: skip
            warm = json.loads(child.stdout.strip().splitlines()[-1])
            saved_ms = row["eager_ms"] - row["compiled_ms"]
            breakeven = f"{warm * 1e3 / saved_ms:.0f}" if saved_ms > 0 else "never"
            print(
                f"| {name} | {precision} | {row['eager_ms']:.1f} | {row['compiled_ms']:.1f} | {row['ratio']:.2f} | "
                f"{row['first_compile_s']:.1f} | {warm:.1f} | {breakeven} |"
            )
            rows.append({"model": name, "precision": precision, **row, "first_compile_warm_cache_s": warm})
    if args.json:
        machine = {"cpu": runtime_module.cpu_name(), "aten": runtime_module.cpu_capability(),
                   "bf16_features": features, "torch": torch.__version__, "threads": args.threads}  # fmt: skip
        Path(args.json).write_text(json.dumps({"machine": machine, "batch": BATCH, "reps": args.reps,
                                               "rows": rows}, indent=2, sort_keys=True) + "\n")  # fmt: skip


if __name__ == "__main__":
    main()
