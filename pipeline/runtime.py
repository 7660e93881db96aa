"""Device, precision, threads and seeds: decided here once and passed down explicitly.

Precision ``auto`` picks bf16 autocast only where the hardware runs it natively: a CUDA device with
bf16 support, or a CPU that reports AVX512-BF16 or AMX *and* passes a short matmul probe. Elsewhere
bf16 is emulated (measured on a 2-core AVX2 EPYC: a bf16 matmul ~90x slower than fp32, a training
step of the offline ViT 12.5x slower), so ``auto`` picks fp32 there.
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
import sys
import time
from dataclasses import dataclass

import numpy as np
import torch

from pipeline.config import RuntimeConfig
from pipeline.errors import UserError

# A CPU that claims native bf16 must run a bf16 matmul at least this much faster than fp32 to be
# trusted with it (native: ~9x faster; emulated: ~90x slower), so the choice is never borderline.
_MIN_BF16_SPEEDUP = 1.0
_PROBE_SIZE = 256


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


def cpu_bf16_features() -> tuple[str, ...]:
    """The native-bf16 features torch reports for this CPU: a subset of ("avx512_bf16", "amx")."""
    cpu = getattr(torch._C, "_cpu", None)
    found = []
    if cpu is not None and getattr(cpu, "_is_avx512_bf16_supported", lambda: False)():
        found.append("avx512_bf16")
    if cpu is not None and getattr(cpu, "_is_amx_tile_supported", lambda: False)():
        found.append("amx")
    return tuple(found)


def cpu_capability() -> str:
    """torch's name for the CPU's vector instruction set (``AVX2``, ``AVX512``, ``DEFAULT``...)."""
    try:
        return torch.backends.cpu.get_cpu_capability()
    except (AttributeError, RuntimeError):  # pragma: no cover - very old torch
        return "unknown"


@functools.cache
def bf16_matmul_speedup() -> float:
    """fp32 time over bf16 time for one square matmul on this CPU (best of 3 each): >1 means bf16 is faster."""

    def best_time(dtype: torch.dtype) -> float:
        a = torch.ones(_PROBE_SIZE, _PROBE_SIZE, dtype=dtype)
        a @ a  # warm-up: kernel selection and allocation
        times = []
        for _ in range(3):
            started = time.perf_counter()
            a @ a
            times.append(time.perf_counter() - started)
        return min(times)

    return best_time(torch.float32) / max(best_time(torch.bfloat16), 1e-9)


def cpu_has_native_bf16() -> bool:
    """True when torch reports AVX512-BF16 or AMX and a bf16 matmul is really faster than fp32 here."""
    return bool(cpu_bf16_features()) and bf16_matmul_speedup() >= _MIN_BF16_SPEEDUP


def describe_cpu() -> str:
    features = cpu_bf16_features()
    native = "native bf16: " + "+".join(features) if features and cpu_has_native_bf16() else "no native bf16"
    return f"{cpu_capability()}, {native}"


@functools.cache
def _warn_emulated_bf16() -> None:
    slowdown = 1 / max(bf16_matmul_speedup(), 1e-9)
    print(
        f"warning: runtime.precision is bf16 but this CPU has no native bf16 ({describe_cpu()}): a bf16 matmul "
        f"ran {slowdown:.0f}x slower than fp32 here; set runtime.precision: auto (or fp32) in params.yaml",
        file=sys.stderr,
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
        _warn_emulated_bf16()
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
    torch.use_deterministic_algorithms(True, warn_only=True)
    device = torch.device("cuda", local_rank) if name == "cuda" and world_size > 1 else torch.device(name)
    if world_size > 1:
        start_process_group(device)
    hardware = describe_cpu() if name == "cpu" else torch.cuda.get_device_name(device) if name == "cuda" else name
    return Runtime(device=device, precision=precision, hardware=hardware, rank=rank, world_size=world_size)


def torchrun_world() -> tuple[int, int, int]:
    """(rank, local rank, world size) from the environment torchrun sets; (0, 0, 1) outside torchrun."""
    env = os.environ
    return int(env.get("RANK", 0)), int(env.get("LOCAL_RANK", 0)), int(env.get("WORLD_SIZE", 1))


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
