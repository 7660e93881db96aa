"""Shared test helpers."""

from __future__ import annotations

import torch

FP32_EPS = torch.finfo(torch.float32).eps


def assert_close_fp32(actual: torch.Tensor, expected: torch.Tensor, terms: int, slack: float = 8.0) -> None:
    """Equal up to fp32 rounding: ``slack * eps * sqrt(terms)`` times the largest magnitude compared.

    A sum of ``terms`` fp32 products comes out in another order on another CPU kind (AVX2 against
    AVX-512), so a fixed absolute tolerance that holds on one kind can miss on the other; the error of
    a reordered sum grows with its magnitude and, in expectation, with the square root of its length.
    A real bug (a wrong weight, a transposed patch) moves values by their own size, far above this.
    """
    scale = max(expected.abs().max().item(), actual.abs().max().item(), 1e-30)
    tolerance = slack * FP32_EPS * terms**0.5 * scale
    difference = (actual.double() - expected.double()).abs().max().item()
    assert difference <= tolerance, f"max |difference| {difference:.3e} exceeds {tolerance:.3e} (scale {scale:.3f})"


def png_claiming(width: int, height: int) -> bytes:
    """A few hundred bytes of greyscale PNG whose header claims ``width`` x ``height`` pixels.

    Its pixel data is a stub: only a reader that trusts the header and starts decoding gets further
    than the size check, so a refusal from the header alone is observable."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")
    )
