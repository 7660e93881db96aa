"""Atomic writes and safe loading: a crash mid-write never leaves a file a later run would trust."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import torch

from pipeline.core.errors import UserError

# ".<name>.<pid>.<random>.tmp" (or ".partial"): the writer's pid tells a dead run's leftover from a live write.
_TEMP_NAME = re.compile(r"\..+\.(\d+)\.[^.]+\.(tmp|partial)")


def temp_prefix(path: str | Path) -> str:
    """The name prefix of this process's temporary files for ``path``, read by :func:`remove_stale_temps`."""
    return f".{Path(path).name}.{os.getpid()}."


def process_alive(pid: int) -> bool:
    """Whether a process with this pid runs on this machine (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def remove_stale_temps(directory: str | Path) -> list[Path]:
    """Deletes temporary files and folders in ``directory`` left by a writer that was killed (SIGKILL, power loss).

    A killed run cannot clean up after itself, and run directly (not through `dvc repro`, which deletes outputs
    first) its leftovers would sit inside an output folder that DVC later hashes. Only names made by
    :func:`temp_prefix` whose process is gone are removed, so a concurrent live write is never touched.

    Returns:
        The paths removed.
    """
    directory = Path(directory)
    if not directory.is_dir():
        return []
    removed = []
    for entry in directory.iterdir():
        match = _TEMP_NAME.fullmatch(entry.name)
        if match is None or process_alive(int(match.group(1))):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
        removed.append(entry)
    return removed


def is_main_process() -> bool:
    """True outside torchrun and on its rank 0: under torchrun only rank 0 writes outputs (every rank computes
    the same thing; the others' writes go to a private temporary folder and are dropped)."""
    return int(os.environ.get("RANK", "0")) == 0


@contextlib.contextmanager
def _discarded(name: str, folder: bool) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="not-rank-0-") as scratch:
        target = Path(scratch) / name
        if folder:
            target.mkdir()
        yield target


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yields a temporary path beside ``path``; renames it into place only if the block succeeds.

    A killed earlier run's leftover temporary files in the same folder are removed first.
    """
    path = Path(path)
    if not is_main_process():
        with _discarded(path.name, folder=False) as tmp:
            yield tmp
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=temp_prefix(path), suffix=".tmp")
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.chmod(tmp_path, 0o666 & ~_umask())  # mkstemp's 0600 would keep files from teammates
        os.replace(tmp_path, path)
    finally:
        tmp_path.unlink(missing_ok=True)


def replace_atomically(new: Path, target: Path) -> None:
    """Renames the complete ``new`` to ``target``, moving an old ``target`` aside first and deleting it after."""
    if not (target.exists() or target.is_symlink()):
        os.replace(new, target)
        return
    old = target.with_name(f"{temp_prefix(target)}old{os.urandom(4).hex()}.partial")
    os.replace(target, old)
    try:
        os.replace(new, target)
    except BaseException:
        os.replace(old, target)
        raise
    if old.is_dir() and not old.is_symlink():
        shutil.rmtree(old, ignore_errors=True)
    else:
        old.unlink()


@contextlib.contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yields an empty temporary folder beside ``path``; it replaces ``path`` whole only if the block succeeds.

    So a stage that writes several files into an output folder leaves either the previous folder or the
    complete new one, never a mix, and no file from an earlier run with other params (a seed since removed).
    """
    path = Path(path)
    if not is_main_process():
        with _discarded(path.name, folder=True) as tmp:
            yield tmp
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(path.parent)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=temp_prefix(path), suffix=".partial"))
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp's 0700 would keep the folder from teammates
        replace_atomically(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone already after a successful rename


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


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
    """``torch.save`` through an atomic rename, streamed to the file (no in-memory copy of the bytes)."""
    with atomic_path(path) as tmp, open(tmp, "wb") as stream:
        torch.save(obj, stream)


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


def _how_to_mend(path: Path) -> str:
    return (
        f"take one side of the merge (`git checkout --ours {path}` or `--theirs`), or make it anew with "
        "`dvc repro -f -s <stage>` for the stage that writes it (`dvc stage list` names each stage's outputs)"
    )


def read_input(path: Path) -> str:
    """A stage's input made by an earlier stage (often a committed metrics or plots file), or a one-line error
    naming the file when it is not there, not text, or holds a merge's conflict markers."""
    if not path.is_file():
        raise UserError(f"{path} is missing; run `dvc repro` (an earlier stage makes it)")
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise UserError(f"{path} is not a text file (damaged or overwritten); {_how_to_mend(path)}") from None
    lines = text.splitlines()
    if any(line.startswith("<<<<<<< ") for line in lines) and any(line.startswith(">>>>>>> ") for line in lines):
        raise UserError(f"{path} has merge-conflict markers (<<<<<<< ... >>>>>>>); {_how_to_mend(path)}")
    return text


def read_csv_text(path: Path) -> str:
    """:func:`read_input` of a CSV file whose rows all have the header's columns; a truncated or damaged one (a
    short or long row, no header) is a one-line error naming it and the row."""
    import csv
    import io

    text = read_input(path)
    rows = list(csv.reader(io.StringIO(text)))
    if not rows or not rows[0]:
        raise UserError(f"{path} has no header row (empty or damaged); {_how_to_mend(path)}")
    for number, row in enumerate(rows[1:], start=2):
        if len(row) != len(rows[0]):
            raise UserError(
                f"{path} is truncated or damaged (line {number} has {len(row)} of its {len(rows[0])} columns); "
                f"{_how_to_mend(path)}"
            )
    return text


def read_json(path: Path) -> dict:
    """:func:`read_input` of a JSON file; a truncated or damaged one is a one-line error naming it."""
    text = read_input(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise UserError(
            f"{path} is not valid JSON ({error.msg} at line {error.lineno} column {error.colno}: truncated or "
            f"damaged); {_how_to_mend(path)}"
        ) from None


def _copy_file(source: str, target: str) -> None:
    """copytree's copy, raising a full disk at once: copytree gathers each file's OSError into one
    ``shutil.Error`` of strings, which hides the errno (and would go on copying onto a full disk)."""
    try:
        shutil.copy2(source, target)
    except OSError as error:
        if error.errno in (errno.ENOSPC, errno.EDQUOT):
            raise UserError(
                f"the disk is full ({error.strerror}) while copying {source}; nothing was kept (the copy is made in "
                "a temporary folder, now removed, and the previous data/raw is intact): free disk space and rerun"
            ) from None
        raise


def copy_tree_atomically(source: Path, target: Path) -> None:
    """Copies ``source`` to ``target`` through a temporary folder, so ``target`` is whole or absent.

    Raises:
        UserError: the disk filled up, or files could not be read (named, with the first reason).
    """
    with atomic_dir(target) as tmp:
        try:
            shutil.copytree(source, tmp, dirs_exist_ok=True, copy_function=_copy_file)
        except shutil.Error as error:
            failures = error.args[0]
            first = failures[0] if isinstance(failures, list) and failures else (source, "", str(error))
            raise UserError(
                f"{len(failures) if isinstance(failures, list) else 1} file(s) of {source} could not be copied "
                f"(first: {first[0]}: {first[-1]}); nothing was kept. Fix their permissions or remove them, and rerun"
            ) from None
