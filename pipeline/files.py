"""Atomic writes and safe loading: a crash mid-write never leaves a file a later run would trust."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import torch

from pipeline.errors import UserError


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yields a temporary path beside ``path``; renames it into place only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp_path, 0o666 & ~umask)  # mkstemp's 0600 would keep files from teammates
        os.replace(tmp_path, path)
    finally:
        tmp_path.unlink(missing_ok=True)


def write_bytes(path: str | Path, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_text(path: str | Path, text: str) -> None:
    write_bytes(path, text.encode())


def write_json(path: str | Path, data) -> None:
    """Writes ``data`` as sorted, indented JSON (stable bytes, so reruns diff cleanly)."""
    write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def tensor_bytes(obj) -> bytes:
    """What ``torch.save`` would write for ``obj``."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def save_tensors(path: str | Path, obj) -> None:
    """``torch.save`` through an atomic rename."""
    write_bytes(path, tensor_bytes(obj))


def load_tensors(path: str | Path):
    """Loads a file written by :func:`save_tensors`, refusing pickled code (``weights_only=True``)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path} is missing; run the stage that makes it (`dvc repro`) or `dvc pull` it")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises UnpicklingError, RuntimeError or EOFError here
        raise UserError(
            f"{path} could not be loaded safely ({type(error).__name__}: {str(error).splitlines()[0][:200]}); "
            "it may be truncated, or hold pickled code, which is refused. Delete it and rerun `dvc repro`"
        ) from None


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
