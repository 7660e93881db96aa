"""Device, precision, threads and seeds: decided here once and passed down explicitly."""

from __future__ import annotations

import contextlib
import random
from dataclasses import dataclass

import numpy as np
import torch

from pipeline.config import RuntimeConfig
from pipeline.errors import UserError


@dataclass(frozen=True)
class Runtime:
    """Where and in which precision the tensors live."""

    device: torch.device
    precision: str  # "bf16" (autocast) or "fp32"

    def autocast(self) -> contextlib.AbstractContextManager:
        """bf16 autocast on this device when ``precision`` is bf16, otherwise a no-op."""
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.precision == "bf16")

    def describe(self) -> str:
        return f"{self.device.type} {self.precision}"


def _mps_available() -> bool:
    return hasattr(torch.backends, "mps") and torch.backends.mps.is_available()


def resolve_runtime(config: RuntimeConfig) -> Runtime:
    """Picks the device (auto: cuda, then mps, then cpu) and a precision it supports.

    Also fixes the CPU thread count and turns on deterministic algorithms, so that the same
    params on the same machine give bitwise-identical results.
    """
    torch.set_num_threads(config.threads)
    if config.device == "auto":
        name = "cuda" if torch.cuda.is_available() else "mps" if _mps_available() else "cpu"
    else:
        name = config.device
        available = {"cpu": True, "cuda": torch.cuda.is_available(), "mps": _mps_available()}[name]
        if not available:
            raise UserError(f"runtime.device is {name!r} but no {name} device is available; set runtime.device: auto")
    device = torch.device(name)
    precision = config.precision
    if precision == "bf16" and name == "cuda" and not torch.cuda.is_bf16_supported():
        precision = "fp32"
    if precision == "bf16" and name == "mps":
        precision = "fp32"  # autocast to bf16 on MPS is not supported by every macOS release
    torch.use_deterministic_algorithms(True, warn_only=True)
    return Runtime(device=device, precision=precision)


def seed_everything(seed: int) -> torch.Generator:
    """Seeds python, numpy and torch; returns a CPU generator for shuffling and augmentation."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)
