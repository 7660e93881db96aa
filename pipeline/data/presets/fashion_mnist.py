"""Fashion-MNIST for the offline preset: Debian's ``dataset-fashion-mnist`` files or torchvision's
mirrors, each verified against the sha256 of its uncompressed IDX bytes, and the IDX reader."""

from __future__ import annotations

import gzip
import hashlib
import logging
import zlib
from pathlib import Path

import numpy as np
import torch

from pipeline.core import paths
from pipeline.core.config import FASHION_MNIST_CLASSES, OfflineConfig
from pipeline.core.errors import UserError
from pipeline.core.files import atomic_dir, file_sha256
from pipeline.data.fetch import CHUNK, Unreachable, byte_size, describe_error, transfer
from pipeline.data.images import (
    FASHION_MNIST_MEAN,
    FASHION_MNIST_STD,
    SINGLE_VIEW,
    ImageSet,
    fit_to_model,
    manifest_rows,
    split_file,
    split_validation,
    subset,
)
from pipeline.data.presets import Preset

log = logging.getLogger(__name__)

FASHION_MNIST_FILES: dict[str, str] = {
    # sha256 of the UNCOMPRESSED IDX bytes: Debian re-gzipped the files, so their .gz differ from upstream's.
    "train-images-idx3-ubyte": "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
    "train-labels-idx1-ubyte": "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
    "t10k-images-idx3-ubyte": "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
    "t10k-labels-idx1-ubyte": "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
}

# torchvision.datasets.FashionMNIST.mirrors (torchvision 0.29.1); plain http, which the sha256 check makes safe.
FASHION_MNIST_MIRRORS: tuple[str, ...] = ("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",)

_IDX_MAGIC = {0x00000801: "labels", 0x00000803: "images"}

# The largest Fashion-MNIST file is 47 MB uncompressed; the cap stops a bad mirror's gzip bomb from filling the disk.
_MAX_IDX_BYTES = 256 << 20

# obtain_fashion_mnist keeps download()'s defaults; module-level so tests can make failures fast.
_MIRROR_RETRIES = 3

_MIRROR_BACKOFF_S = 1.0
_MIRROR_MAX_BYTES = 64 << 20  # the largest file, train-images-idx3-ubyte.gz, is 26 MB

_DEBIAN_INSTALL = "sudo apt-get install dataset-fashion-mnist"

_DEBIAN_REINSTALL = "sudo apt-get install --reinstall dataset-fashion-mnist"


class _CorruptFile(Exception):
    """A file could not be decompressed; the message says why."""


def read_idx(path: Path) -> np.ndarray:
    """Reads an IDX file (the MNIST format), plain or gzip-compressed (told apart by the gzip magic bytes).

    Args:
        path: The file; magic 0x00000801 holds uint8 labels, 0x00000803 uint8 images.

    Returns:
        A writable uint8 array: shape (N,) for labels, (N, rows, cols) for images.

    Raises:
        UserError: The file is missing, not valid gzip, or not a well-formed uint8 IDX file.
    """
    path = Path(path)

    def bad(why: str) -> UserError:
        return UserError(f"{path} is not a valid IDX file: {why}; delete it and rerun the download stage")

    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"{path} not found; rerun the download stage") from None
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (gzip.BadGzipFile, EOFError, zlib.error) as error:
            raise bad(f"its gzip data is corrupt ({error})") from None
    if len(data) < 4:
        raise bad(f"only {len(data)} bytes, too short for the magic number")
    magic = int.from_bytes(data[:4], "big")
    if data[:2] != b"\x00\x00":
        raise bad(f"magic number 0x{magic:08x} does not start with two zero bytes")
    if data[2] != 0x08:
        raise bad(f"dtype code 0x{data[2]:02x} is not supported, only 0x08 (unsigned byte)")
    if magic not in _IDX_MAGIC:
        raise bad(f"magic number 0x{magic:08x} is neither 0x00000801 (labels) nor 0x00000803 (images)")
    ndim = data[3]
    header = 4 + 4 * ndim
    if len(data) < header:
        raise bad(f"only {len(data)} bytes, too short for the {ndim} dimension sizes")
    dims = tuple(int(d) for d in np.frombuffer(data, dtype=">u4", count=ndim, offset=4))
    expected = int(np.prod(dims, dtype=np.int64))
    if len(data) - header != expected:
        raise bad(f"payload is {len(data) - header:,} bytes but dimensions {dims} need {expected:,}")
    # bytearray so the result is writable (np.frombuffer over bytes is read-only).
    return np.frombuffer(bytearray(data[header:]), dtype=np.uint8).reshape(dims)


def obtain_fashion_mnist(
    dest: Path,
    *,
    debian_dir: Path,
    mirror: bool,
    files: dict[str, str] = FASHION_MNIST_FILES,
    mirrors: tuple[str, ...] = FASHION_MNIST_MIRRORS,
) -> Path:
    """Produces ``dest/`` with the uncompressed Fashion-MNIST IDX files, each verified against its sha256.

    Each file comes from the Debian package ``dataset-fashion-mnist`` (``debian_dir/NAME.gz`` or
    ``debian_dir/NAME``) or, when ``mirror`` is true and the Debian file is missing or bad, from torchvision's
    mirrors (``MIRROR + NAME + ".gz"``). ``dest`` appears only once every file is verified; an existing ``dest``
    whose files all verify is returned untouched.

    Args:
        dest: The folder to create.
        debian_dir: Where the Debian package puts the files.
        mirror: Whether to download from ``mirrors`` when the Debian files are missing or bad.
        files: File name -> sha256 of its uncompressed bytes.
        mirrors: Base URLs, tried in turn.

    Returns:
        ``dest``.

    Raises:
        UserError: No source has a file, or a Debian file is corrupt and no mirror could replace it.
    """
    dest, debian_dir = Path(dest), Path(debian_dir)
    if dest.is_dir() and all((dest / name).is_file() and file_sha256(dest / name) == h for name, h in files.items()):
        return dest
    debian = {name: _debian_file(debian_dir, name) for name in files}
    if not mirror and not any(debian.values()):
        # Checked before touching the disk, so the commonest failure writes nothing at all.
        raise UserError(_no_source(next(iter(files)), debian_dir, mirror, []))
    with atomic_dir(dest) as tmp:
        dead: set[str] = set()  # mirrors that could not be reached: not worth retrying for the next file
        for name, expected in files.items():
            _obtain_one(name, expected, debian[name], tmp, debian_dir, mirror, mirrors, dead)
    return dest


def _debian_file(debian_dir: Path, name: str) -> Path | None:
    for candidate in (debian_dir / f"{name}.gz", debian_dir / name):
        if candidate.is_file():
            return candidate
    return None


def _obtain_one(
    name: str,
    expected: str,
    source: Path | None,
    folder: Path,
    debian_dir: Path,
    mirror: bool,
    mirrors: tuple[str, ...],
    dead: set[str],
) -> None:
    """Writes ``folder/name`` verified, from the Debian file or else a mirror; raises UserError if neither works."""
    out = folder / name
    debian_problem = ""
    if source is not None:
        try:
            actual = _decompress_to(source, out)
        except _CorruptFile as error:
            actual, debian_problem = "", f"{source} is corrupt ({error})"
        if actual == expected:
            return
        debian_problem = debian_problem or (
            f"{source} does not match its pinned hash: expected sha256 {expected} of the uncompressed file, "
            f"got {actual}"
        )
        if not mirror:
            raise UserError(f"{debian_problem}; reinstall the package: {_DEBIAN_REINSTALL}")
        log.warning(f"{debian_problem}; trying torchvision's mirrors instead")
    elif not mirror:
        raise UserError(_no_source(name, debian_dir, mirror, []))

    failures = []
    for base in mirrors:
        url = f"{base}{name}.gz"
        if base in dead:
            failures.append(f"{base} skipped, unreachable for an earlier file")
            continue
        gz = folder / f"{name}.gz"
        try:
            transfer(url, gz, retries=_MIRROR_RETRIES, backoff_s=_MIRROR_BACKOFF_S, progress=True, timeout_s=30.0,
                     max_bytes=_MIRROR_MAX_BYTES)  # fmt: skip
            actual = _decompress_to(gz, out)
        except Unreachable as error:
            dead.add(base)
            failures.append(str(error))
            continue
        except (UserError, _CorruptFile) as error:
            failures.append(f"{url}: {error}")
            continue
        finally:
            gz.unlink(missing_ok=True)
        if actual == expected:
            return
        failures.append(f"{url} does not match: expected sha256 {expected} of the uncompressed file, got {actual}")
    out.unlink(missing_ok=True)
    if debian_problem:
        raise UserError(
            f"{debian_problem}; reinstall the package: {_DEBIAN_REINSTALL} (the mirrors failed too: "
            f"{'; '.join(failures)})"
        )
    raise UserError(_no_source(name, debian_dir, mirror, failures))


def _no_source(name: str, debian_dir: Path, mirror: bool, failures: list[str]) -> str:
    looked = f"Fashion-MNIST file {name} is not in {debian_dir} (looked for {name}.gz and {name})"
    if mirror:
        tried = f", and torchvision's mirrors failed: {'; '.join(failures) or 'none configured'}"
    else:
        tried = ", and downloading from torchvision's mirrors is off (offline.mirror: false in params.yaml)"
    return (
        f"{looked}{tried}. Get it either way: install the Debian package with `{_DEBIAN_INSTALL}` (Debian/Ubuntu; "
        f"or point offline.debian_dir in params.yaml at a folder holding the files), or use an internet connection "
        f"so torchvision's mirrors can be used (`offline.mirror: true` in params.yaml enables that)"
    )


def _decompress_to(src: Path, out: Path) -> str:
    """Copies ``src`` to ``out``, gunzipping it if it starts with the gzip magic; returns the output's sha256."""
    with open(src, "rb") as f:
        gzipped = f.read(2) == b"\x1f\x8b"
    digest, written = hashlib.sha256(), 0
    try:
        with gzip.open(src, "rb") if gzipped else open(src, "rb") as f, open(out, "wb") as o:
            while chunk := f.read(CHUNK):
                written += len(chunk)
                if written > _MAX_IDX_BYTES:
                    raise _CorruptFile(f"it unpacks to more than {byte_size(_MAX_IDX_BYTES)}")
                digest.update(chunk)
                o.write(chunk)
    except (gzip.BadGzipFile, EOFError, zlib.error) as error:
        raise _CorruptFile(describe_error(error)) from None
    return digest.hexdigest()


def prepare_offline(raw: Path, out: Path, classes: list[str], val_per_class: int, image_size: int,
                    channels: int) -> dict:  # fmt: skip
    """The offline preset's splits from the IDX files in ``raw`` into ``out``: the target ``classes``'
    validation images (``val_per_class`` per class) and whole test set, every other training image of those
    classes (``train_all``, from which every arm draws its training subsets), and the pretraining pool (every
    image of the other classes, train and test), each resized to ``image_size`` with ``channels`` channels.
    Returns classes, counts and manifest rows."""
    train_images, train_labels = read_idx(raw / "train-images-idx3-ubyte"), read_idx(raw / "train-labels-idx1-ubyte")
    test_images, test_labels = read_idx(raw / "t10k-images-idx3-ubyte"), read_idx(raw / "t10k-labels-idx1-ubyte")
    target = [FASHION_MNIST_CLASSES.index(name) for name in classes]
    pool = [i for i in range(len(FASHION_MNIST_CLASSES)) if i not in target]
    target_names, pool_names = list(classes), [FASHION_MNIST_CLASSES[i] for i in pool]

    target_train = np.flatnonzero(np.isin(train_labels, target))
    remap = {class_id: i for i, class_id in enumerate(target)}
    target_labels = torch.tensor([remap[int(label)] for label in train_labels[target_train]])
    train_part, val_part = split_validation(target_labels, val_per_class)
    splits = {
        "val": (train_images, train_labels, target_train[val_part.numpy()], target, target_names, "train"),
        "test": (test_images, test_labels, np.flatnonzero(np.isin(test_labels, target)), target, target_names, "t10k"),
        "pool_train": (
            train_images,
            train_labels,
            np.flatnonzero(np.isin(train_labels, pool)),
            pool,
            pool_names,
            "train",
        ),
        "pool_test": (test_images, test_labels, np.flatnonzero(np.isin(test_labels, pool)), pool, pool_names, "t10k"),
        # The target classes' other training images (16,500: 5,500 a class; 13 MB): every arm's training subsets.
        "train_all": (train_images, train_labels, target_train[train_part.numpy()], target, target_names, "train"),
    }
    manifest, counts = [], {}
    for split, (images, labels, indices, class_ids, names, source) in splits.items():
        picked, new_labels = subset(images, labels, indices, class_ids)
        picked = fit_to_model(picked, image_size, channels)
        image_set = ImageSet(picked, new_labels, names, FASHION_MNIST_MEAN * channels, FASHION_MNIST_STD * channels)
        if split in SINGLE_VIEW:
            image_set.save(out / f"{split}.pt")
        else:
            for view in paths.VIEWS:  # both arms see the same inputs: the backbone was pretrained on them
                image_set.save(split_file(out, view, split))
        sources = [f"{source}-images-idx3-ubyte#{i}" for i in indices]
        manifest += manifest_rows(split, picked, new_labels, names, sources)
        counts[split] = len(new_labels)
    return {"classes": target_names, "pool_classes": pool_names, "counts": counts, "manifest": manifest}


def obtain(config: OfflineConfig, raw: Path, downloads: Path) -> Path:
    return obtain_fashion_mnist(raw / "fashion-mnist", debian_dir=Path(config.debian_dir), mirror=config.mirror)


def prepare(config: OfflineConfig, raw: Path, out: Path, view_sizes: dict[str, tuple[int, int]], val_per_class: int,
            max_pixels: int) -> dict:  # fmt: skip
    # one model for both views: the backbone was pretrained on the same 28x28 inputs
    return prepare_offline(raw / "fashion-mnist", out, config.classes, val_per_class, *view_sizes["scratch"])


PRESET = Preset(
    name="offline",
    obtain=obtain,
    prepare=prepare,
    view_models=lambda config: {"scratch": config.model, "pretrained": config.model},
    training_file=lambda view: paths.PREPARED / "train_all.pt",  # every target training image but validation's
    has_pool=True,
    sizes_are_counts=True,
    pretrained_view_crops=False,
)
