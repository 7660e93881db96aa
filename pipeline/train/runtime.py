"""Device, precision, threads and seeds: decided here once and passed down explicitly.

Precision ``auto`` picks bf16 autocast only where it pays: a CUDA device with bf16 support, or a CPU
that reports native bf16 (AVX512-BF16 or AMX, read from ``/proc/cpuinfo`` on Linux, from torch's ATen
capability elsewhere) *and* on which a training step of the offline ViT runs faster in bf16 than in fp32
(:func:`bf16_step_speedup`). Where bf16 is emulated (a 2-core AVX2 EPYC: a bf16 matmul ~90x slower than
fp32, a training step ~12x slower) ``auto`` never probes and picks fp32. On a Sapphire Rapids (AMX) a bf16
matmul is several times faster but a step of the small offline ViT only a little: most of its time is
outside the matmuls, which is why the probe times a step and not a matmul.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import platform
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from pipeline.core.config import RuntimeConfig
from pipeline.core.errors import UserError

log = logging.getLogger(__name__)

# bf16 must make the probe's training step at least this much faster than fp32 to be chosen by ``auto``: a
# margin over the probe's run-to-run noise (a few per cent), so that the choice is never a coin toss.
MIN_BF16_SPEEDUP = 1.05
PROBE_BATCH = 64  # data_hunger.batch_size: the step the sweeps repeat most
PROBE_CACHE_VERSION = 3  # 2: the probe times our ViT, not torchvision's; 3: fastest steps, not medians
CPUINFO = Path("/proc/cpuinfo")


@dataclass(frozen=True)
class Runtime:
    """Where and in which precision the tensors live."""

    device: torch.device
    precision: str  # "bf16" (autocast) or "fp32"
    hardware: str = ""  # e.g. "AVX2, no native bf16" or a GPU's name: what bitwise reproducibility depends on
    rank: int = 0  # this process's place in a torchrun job (DistributedDataParallel); 0 of 1 otherwise
    world_size: int = 1

    def autocast(self) -> contextlib.AbstractContextManager:
        """bf16 autocast on this device when ``precision`` is bf16, otherwise a no-op."""
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.precision == "bf16")

    @property
    def pin_memory(self) -> bool:
        """Page-locked host batches let ``to(device, non_blocking=True)`` overlap the copy on CUDA."""
        return self.device.type == "cuda"

    def to_device(self, batch: torch.Tensor) -> torch.Tensor:
        if self.device.type != "cuda":
            return batch.to(self.device)
        return batch.pin_memory().to(self.device, non_blocking=True)

    def describe(self) -> str:
        """One line for metrics files: device, precision and CPU kind, e.g. ``cpu fp32 (AVX2, no native bf16)``."""
        suffix = f" ({self.hardware})" if self.hardware else ""
        processes = f", {self.world_size} processes (DDP)" if self.world_size > 1 else ""
        return f"{self.device.type} {self.precision}{suffix}{processes}"

    def tags(self) -> dict[str, str]:
        """For MLflow: the precision actually used and the hardware that decided it."""
        return {"device": self.device.type, "precision": self.precision, "hardware": self.hardware}


def _mps_available() -> bool:
    return hasattr(torch.backends, "mps") and torch.backends.mps.is_available()


def cpuinfo_flags(cpuinfo: Path = CPUINFO) -> frozenset[str] | None:
    """The CPU's feature flags as Linux lists them (the first ``flags`` line), or None without ``/proc/cpuinfo``."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):  # x86 | arm64
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def cpu_bf16_features(cpuinfo: Path = CPUINFO) -> tuple[str, ...]:
    """The native-bf16 features of this CPU: a subset of ("avx512_bf16", "amx_bf16").

    Linux's flags where the file exists; elsewhere torch's ATen capability (``AMX`` or ``AVX512_BF16`` where
    torch names them). torch 2.14's ``torch._C._cpu`` no longer has the ``_is_*_supported`` queries, which is
    why the flags are read from the kernel.
    """
    flags = cpuinfo_flags(cpuinfo)
    if flags is None:
        capability = cpu_capability().lower()
        return tuple(name for name, key in (("avx512_bf16", "bf16"), ("amx_bf16", "amx")) if key in capability)
    return tuple(name for name in ("avx512_bf16", "amx_bf16") if name in flags)


def cpu_capability() -> str:
    """torch's name for the CPU's vector instruction set (``AVX2``, ``AVX512``, ``DEFAULT``...)."""
    try:
        return torch.backends.cpu.get_cpu_capability()
    except (AttributeError, RuntimeError):  # pragma: no cover - very old torch
        return "unknown"


def cpu_name(cpuinfo: Path = CPUINFO) -> str:
    """The CPU's model name from ``/proc/cpuinfo``, falling back to ``platform.processor()``."""
    with contextlib.suppress(OSError):
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "unknown"


def probe_cache_path() -> Path:
    """Where the step probe's answer is kept between processes: ``$PIPELINE_CACHE_DIR`` or the user's cache."""
    root = os.environ.get("PIPELINE_CACHE_DIR") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return Path(root) / "vit-data-hunger" / "bf16_probe.json"


def _probe_key(reps: int) -> str:
    # what the answer depends on: the chip, torch's kernels and the threads that run them
    return f"v{PROBE_CACHE_VERSION}|{cpu_name()}|{cpu_capability()}|torch {torch.__version__}|" \
        f"threads {torch.get_num_threads()}|reps {reps}"  # fmt: skip


def probe_step(precision: str, batch_size: int = PROBE_BATCH):
    """A closure that runs one training step (AdamW) at ``batch_size`` of the offline ViT (``pipeline.models.vit``'s
    ``fmnist`` preset: 28 px, patch 7, 6 layers, width 128, 4 heads, MLP 512: 17 tokens), the model the sweeps
    train most. Not torchvision's ViT: its attention runs PyTorch's fused kernel, whose slow bf16 backward made
    bf16 look slower than fp32 on a machine where our ViT (explicit attention under bf16) runs faster in bf16
    (docs/reproducibility.md; metrics/repro_time.json, ``same_machine_bf16_check``)."""
    from pipeline.models.vit import ViT, vit_config

    generator = torch.Generator().manual_seed(0)
    model = ViT(vit_config("fmnist", num_classes=3))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    size = model.config.image_size
    images = torch.randn(batch_size, model.config.in_channels, size, size, generator=generator)
    labels = torch.randint(0, 3, (batch_size,), generator=generator)

    def step() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            logits = model(images)
        loss = torch.nn.functional.cross_entropy(logits.float(), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def measure_bf16_step_speedup(reps: int, warmup: int = 2) -> float:
    """fp32 over bf16 time of the probe's fastest step, the two precisions timed in alternation.

    The fastest of ``reps`` steps, not their median: another process on the same cores (a test worker, a second
    stage) lengthens some steps of either precision by up to 10x, and the median follows it, while a step's
    shortest time is the one it gets when the cores are its own (the readings behind this choice are in
    docs/reproducibility.md)."""
    seconds: dict[str, list[float]] = {"fp32": [], "bf16": []}
    # the probe's model draws its weights from torch's generator: a stage's draws must not depend on whether
    # the answer came from the cache
    with torch.random.fork_rng(devices=[]):
        steps = {precision: probe_step(precision) for precision in seconds}
        for rep in range(warmup + reps):
            for precision, step in steps.items():
                started = time.perf_counter()
                step()
                if rep >= warmup:
                    seconds[precision].append(time.perf_counter() - started)
    return min(seconds["fp32"]) / max(min(seconds["bf16"]), 1e-9)


@functools.cache
def bf16_step_speedup(reps: int = 15) -> float:
    """fp32 time over bf16 time of one training step of the offline ViT here: >1 means bf16 is faster.

    Measured once per machine (chip, torch version, threads) and kept in :func:`probe_cache_path`, so that every
    stage process of a repro takes the same decision and does not pay the ~2 s probe again; cached for the
    process besides.
    """
    cache, key = probe_cache_path(), _probe_key(reps)
    with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):  # a damaged cache is measured anew
        value = json.loads(cache.read_text()).get(key)
        if isinstance(value, (int, float)) and value > 0:
            return float(value)
    speedup = measure_bf16_step_speedup(reps)
    with contextlib.suppress(OSError, ValueError):
        known = {}
        with contextlib.suppress(OSError, ValueError):
            known = json.loads(cache.read_text())
        known = known if isinstance(known, dict) else {}
        cache.parent.mkdir(parents=True, exist_ok=True)
        partial = cache.with_name(f".{cache.name}.{os.getpid()}")
        partial.write_text(json.dumps(known | {key: round(speedup, 4)}, indent=1, sort_keys=True))
        partial.replace(cache)
    return speedup


def cpu_has_native_bf16() -> bool:
    """True when the CPU reports AVX512-BF16 or AMX and a training step is really faster in bf16 here."""
    return bool(cpu_bf16_features()) and bf16_step_speedup() >= MIN_BF16_SPEEDUP


def describe_cpu() -> str:
    """E.g. ``AVX512, native bf16: avx512_bf16+amx_bf16 (step 1.29x)``, or ``AVX2, no native bf16``; the step
    probe's ratio where this process asked for it (precision auto or bf16), else the features alone."""
    features = cpu_bf16_features()
    if not features:
        return f"{cpu_capability()}, no native bf16"
    if not bf16_step_speedup.cache_info().currsize:
        return f"{cpu_capability()}, bf16 features: {'+'.join(features)} (not probed)"
    speedup = bf16_step_speedup()
    verdict = "native bf16" if speedup >= MIN_BF16_SPEEDUP else "bf16 not faster"
    return f"{cpu_capability()}, {verdict}: {'+'.join(features)} (step {speedup:.2f}x)"


@functools.cache
def _warn_slow_bf16() -> None:
    # two timed steps: on an emulating CPU a bf16 step of the offline ViT takes about a second
    speedup = bf16_step_speedup(reps=2) if not cpu_bf16_features() else bf16_step_speedup()
    log.warning(
        f"runtime.precision is bf16 but bf16 is not faster on this CPU ({cpu_capability()}, features: "
        f"{'+'.join(cpu_bf16_features()) or 'no avx512_bf16/amx_bf16'}): a training step of the offline ViT ran "
        f"{1 / max(speedup, 1e-9):.2f}x as long as in fp32 here; set runtime.precision: auto (or fp32) in "
        "params.yaml"
    )


def choose_precision(requested: str, device_type: str) -> str:
    """The precision to run in: ``auto`` -> bf16 only where it is native; an explicit choice is kept
    where the device can run it at all (on a CPU without native bf16, with a one-line warning)."""
    if device_type == "cuda":
        supported = torch.cuda.is_bf16_supported()
        return "bf16" if requested in ("auto", "bf16") and supported else "fp32"
    if device_type == "mps":
        return "fp32"  # autocast to bf16 on MPS is not supported by every macOS release
    if requested == "auto":
        return "bf16" if cpu_has_native_bf16() else "fp32"
    if requested == "bf16" and not cpu_has_native_bf16():
        _warn_slow_bf16()
    return requested


def resolve_runtime(config: RuntimeConfig) -> Runtime:
    """Picks the device (auto: cuda, then mps, then cpu) and a precision it runs well.

    Also fixes the CPU thread count and turns on deterministic algorithms, so that the same
    params on the same kind of machine, in the same precision, give bitwise-identical results.
    """
    torch.set_num_threads(config.threads)
    rank, local_rank, world_size = torchrun_world() if config.distributed == "auto" else (0, 0, 1)
    if config.device == "auto":
        name = "cuda" if torch.cuda.is_available() else "mps" if _mps_available() else "cpu"
    else:
        name = config.device
        available = {"cpu": True, "cuda": torch.cuda.is_available(), "mps": _mps_available()}[name]
        if not available:
            raise UserError(f"runtime.device is {name!r} but no {name} device is available; set runtime.device: auto")
    if name == "cuda":
        # cuBLAS is deterministic only with a fixed workspace; it must be set before cuBLAS starts.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    precision = choose_precision(config.precision, name)
    use_deterministic_algorithms()
    device = torch.device("cuda", local_rank) if name == "cuda" and world_size > 1 else torch.device(name)
    if world_size > 1:
        start_process_group(device)
    hardware = describe_cpu() if name == "cpu" else torch.cuda.get_device_name(device) if name == "cuda" else name
    return Runtime(device=device, precision=precision, hardware=hardware, rank=rank, world_size=world_size)


def use_deterministic_algorithms() -> None:
    """``torch.use_deterministic_algorithms(True, warn_only=True)`` without its import of ``torch._inductor``
    (about 2 s of every stage process's start on 2 cores) where inductor is not loaded: the pipeline does not
    compile, and a later ``import torch._inductor`` reads the flag through ``torch.compile``'s own config only,
    so set it there too when it is loaded."""
    if "torch._inductor.config" in sys.modules:
        torch.use_deterministic_algorithms(True, warn_only=True)
    else:
        torch._C._set_deterministic_algorithms(True, warn_only=True)


def torchrun_world() -> tuple[int, int, int]:
    """(rank, local rank, world size) from the environment torchrun sets; (0, 0, 1) outside torchrun."""
    env = os.environ
    try:
        rank, local_rank, world_size = (int(env.get(k, d)) for k, d in (("RANK", 0), ("LOCAL_RANK", 0),
                                                                        ("WORLD_SIZE", 1)))  # fmt: skip
    except ValueError:
        message = (f"RANK, LOCAL_RANK and WORLD_SIZE must be integers, got RANK={env.get('RANK')!r}, "
                   f"WORLD_SIZE={env.get('WORLD_SIZE')!r}; unset them, or start the stage with torchrun")  # fmt: skip
        raise UserError(message) from None
    if world_size < 1 or not 0 <= rank < world_size or not 0 <= local_rank < world_size:
        # a RANK left in the shell without WORLD_SIZE made a stage believe it was rank 1 of 1: it wrote nothing
        raise UserError(f"the environment says RANK={rank}, LOCAL_RANK={local_rank}, WORLD_SIZE={world_size}, which "
                        "no torchrun job has; unset RANK, LOCAL_RANK and WORLD_SIZE (`unset RANK LOCAL_RANK "
                        "WORLD_SIZE`), or start the stage with torchrun")  # fmt: skip
    return rank, local_rank, world_size


DIST_TIMEOUT_S = 120  # a rank that waits this long for a dead peer gives up instead of hanging the job


def start_process_group(device: torch.device) -> None:
    """Joins torchrun's process group: NCCL between GPUs, gloo on CPUs (both read MASTER_ADDR/PORT, RANK and
    WORLD_SIZE from torchrun's environment)."""
    import datetime

    import torch.distributed as dist

    if dist.is_initialized():
        return
    if device.type == "cuda":
        torch.cuda.set_device(device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=DIST_TIMEOUT_S))


def seed_everything(seed: int) -> torch.Generator:
    """Seeds python, numpy and torch; returns a CPU generator for shuffling and augmentation."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)
