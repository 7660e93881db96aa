"""Getting files from the network or disk safely: verified downloads, safe unzipping, IDX reading, Fashion-MNIST.

Every function here either produces a complete, verified result or leaves nothing behind: files and folders are
built under a temporary name beside their destination and renamed into place only once they are known good, so
a failed or interrupted run is never mistaken for a finished one on the next run.
"""

from __future__ import annotations

import gzip
import hashlib
import http.client
import os
import re
import stat
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
import zipfile
import zlib
from pathlib import Path

import numpy as np

from pipeline.errors import UserError
from pipeline.files import atomic_dir, remove_stale_temps, temp_prefix

ALLOWED_SCHEMES = ("https", "http", "file")
FASHION_MNIST_FILES: dict[str, str] = {
    # sha256 of the UNCOMPRESSED IDX bytes: Debian re-gzipped the files, so their .gz differ from upstream's.
    "train-images-idx3-ubyte": "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
    "train-labels-idx1-ubyte": "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
    "t10k-images-idx3-ubyte": "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
    "t10k-labels-idx1-ubyte": "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
}
# torchvision.datasets.FashionMNIST.mirrors (torchvision 0.29.1); plain http, which the sha256 check makes safe.
FASHION_MNIST_MIRRORS: tuple[str, ...] = ("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",)

_CHUNK = 1 << 20
_USER_AGENT = "vit-data-hunger (python urllib)"
_IDX_MAGIC = {0x00000801: "labels", 0x00000803: "images"}
# The largest Fashion-MNIST file is 47 MB uncompressed; the cap stops a bad mirror's gzip bomb from filling the disk.
_MAX_IDX_BYTES = 256 << 20
# obtain_fashion_mnist keeps download()'s defaults; module-level so tests can make failures fast.
_MIRROR_RETRIES = 3
_MIRROR_BACKOFF_S = 1.0
_DEBIAN_INSTALL = "sudo apt-get install dataset-fashion-mnist"
_DEBIAN_REINSTALL = "sudo apt-get install --reinstall dataset-fashion-mnist"


class _Unreachable(UserError):
    """Every attempt at a URL failed with a transient (network or 5xx) error."""


class _CorruptFile(Exception):
    """A file could not be decompressed; the message says why."""


def sha256_file(path: Path) -> str:
    """Hashes a file in chunks, so large files never sit in memory whole.

    Args:
        path: The file to hash.

    Returns:
        The lowercase hex SHA-256 digest.
    """
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def download(
    url: str,
    dest: Path,
    sha256: str,
    *,
    retries: int = 3,
    backoff_s: float = 1.0,
    progress: bool = True,
    timeout_s: float = 30.0,
) -> Path:
    """Downloads ``url`` to ``dest`` atomically, verifying its SHA-256; a verified ``dest`` is reused as a cache.

    The bytes go to a temporary file beside ``dest`` that is renamed into place only after the hash matches, so
    ``dest`` is never partial and an existing ``dest`` survives a failed re-download.

    Args:
        url: An https, http or file URL.
        dest: Where the file ends up; its folder is created if missing.
        sha256: The full hex digest, or a prefix of at least 8 hex digits (torchvision pins 8).
        retries: Attempts in all before giving up on transient errors (network errors, timeouts, HTTP 5xx,
            truncated transfers), waiting ``backoff_s``, ``2 * backoff_s``, ... between them. 4xx fails at once.
        backoff_s: The first wait between attempts, in seconds.
        progress: Whether to show a progress bar on stderr (only when it is a terminal).
        timeout_s: Socket timeout for connecting and for each read, so a dead server cannot hang the run.

    Returns:
        ``dest``.

    Raises:
        UserError: A bad URL or hash, an unreachable server, an HTTP error, or a hash mismatch.
    """
    if retries < 1:
        raise ValueError(f"retries must be at least 1, got {retries}")
    dest = Path(dest)
    expected = _check_sha256(sha256)
    _check_url(url)
    if dest.is_file() and sha256_file(dest).startswith(expected):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(dest.parent)  # a killed earlier download's partial file
    # Not mkstemp: its 0600 mode would follow the file into place and hide a shared data folder from others.
    tmp = dest.with_name(f"{temp_prefix(dest)}{uuid.uuid4().hex}.partial")
    try:
        _transfer(url, tmp, retries=retries, backoff_s=backoff_s, progress=progress, timeout_s=timeout_s)
        actual = sha256_file(tmp)
        if not actual.startswith(expected):
            wanted = expected if len(expected) == 64 else f"a hash starting with {expected}"
            raise UserError(
                f"sha256 mismatch for {url}: expected {wanted}, got {actual} ({tmp.stat().st_size:,} bytes "
                f"downloaded); nothing was saved. If the file changed upstream and you trust it, check it yourself "
                f"(e.g. `sha256sum FILE`) and set the new hash in params.yaml"
            )
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return dest


def _check_sha256(sha256: str) -> str:
    if not isinstance(sha256, str) or re.fullmatch(r"[0-9a-fA-F]{8,64}", sha256) is None:
        raise UserError(f"sha256 {sha256!r} is not a sha256 or a prefix of one; give 8 to 64 hex digits in params.yaml")
    return sha256.lower()


def _check_url(url: str) -> None:
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme not in ALLOWED_SCHEMES:
        got = f"scheme {parsed.scheme!r}" if parsed.scheme else "no scheme"
        raise UserError(
            f"URL {url!r} has {got}; only {', '.join(ALLOWED_SCHEMES)} are allowed "
            f"(for a local file write file:///absolute/path); fix the URL in params.yaml"
        )
    if parsed.scheme in ("http", "https") and not parsed.hostname:
        raise UserError(f"URL {url!r} has no host name; fix the URL in params.yaml")
    if parsed.scheme == "file":
        # A missing local file is not transient, so it must not be retried like a network error.
        path = Path(urllib.request.url2pathname(parsed.path))
        if not path.is_file():
            raise UserError(f"{url} points to {path}, which is not a file; fix the URL in params.yaml")


def _transfer(url: str, path: Path, *, retries: int, backoff_s: float, progress: bool, timeout_s: float) -> None:
    """Writes the bytes at ``url`` to ``path``, retrying transient failures; no hash check."""
    last = ""
    server_error = False
    for attempt in range(1, retries + 1):
        try:
            _transfer_once(url, path, progress=progress, timeout_s=timeout_s)
            return
        except urllib.error.HTTPError as error:  # before URLError: HTTPError is a subclass
            error.close()
            if error.code < 500:
                hint = " (it may need a login or be private)" if error.code in (401, 403) else ""
                raise UserError(
                    f"{url} returned HTTP {error.code} {error.reason}{hint}; check the URL in params.yaml"
                ) from None
            last, server_error = f"HTTP {error.code} {error.reason}", True
        except urllib.error.URLError as error:
            last, server_error = _describe(error.reason), False
        except (http.client.HTTPException, TimeoutError, ConnectionError) as error:
            last, server_error = _describe(error), False
        if attempt < retries:
            time.sleep(backoff_s * 2 ** (attempt - 1))
    if server_error:
        raise _Unreachable(
            f"{url} kept failing after {retries} attempts (last: {last}); the server has a problem, "
            f"rerun later to retry (or check your internet connection or proxy)"
        )
    raise _Unreachable(
        f"could not reach {url} after {retries} attempts ({last}); check your internet connection or proxy, "
        f"then rerun to retry"
    )


def _transfer_once(url: str, path: Path, *, progress: bool, timeout_s: float) -> None:
    # torch.hub.download_url_to_file would give the same progress bar, but it cannot take a timeout and silently
    # keeps a truncated body (http.client returns b"" at an early close), which would surface as a misleading
    # hash mismatch instead of a retried transfer.
    from torch.hub import tqdm  # tqdm, or torch's fallback when it is not installed

    request = urllib.request.Request(url, headers={"User-Agent": _USER_AGENT})
    with urllib.request.urlopen(request, timeout=timeout_s) as response, open(path, "wb") as f:
        length = response.headers.get("Content-Length")
        expected = int(length) if length and length.isdigit() else None
        written = 0
        # disable=None: a bar on a terminal only, so logs and CI keep one line per event
        disable = None if progress else True
        with tqdm(total=expected, disable=disable, unit="B", unit_scale=True, unit_divisor=1024) as bar:
            while chunk := response.read(_CHUNK):
                f.write(chunk)
                written += len(chunk)
                bar.update(len(chunk))
    if expected is not None and written != expected:
        raise ConnectionError(f"transfer cut short: got {written:,} of {expected:,} bytes")


def _describe(error: object) -> str:
    if isinstance(error, BaseException):
        text = str(error)
        return f"{type(error).__name__}: {text}" if text else type(error).__name__
    return str(error)


def safe_extract_zip(archive: Path, target: Path, *, max_bytes: int) -> Path:
    """Extracts a zip archive into ``target`` after checking every member, replacing ``target`` atomically.

    Nothing is extracted unless every member is a plain file or folder inside the archive's root (no absolute
    paths, ``..``, drive letters, backslashes, symlinks or encryption) and the declared total fits ``max_bytes``.
    Bytes are counted again while extracting in case the headers lie. ``__MACOSX/`` and ``.DS_Store`` are skipped.

    Args:
        archive: The zip file.
        target: The folder to create; an existing one is replaced only once the new one is complete.
        max_bytes: The most uncompressed bytes to write (zip-bomb guard).

    Returns:
        ``target``.

    Raises:
        UserError: The archive is missing, corrupt, unsafe, or too large.
    """
    archive, target = Path(archive), Path(target)
    try:
        zf = zipfile.ZipFile(archive)
    except FileNotFoundError:
        raise UserError(f"archive {archive} not found; rerun the download stage") from None
    except zipfile.BadZipFile as error:
        raise UserError(f"archive {archive} is corrupt ({error}); delete it and rerun") from None
    with zf:
        members = _checked_members(zf, archive)
        declared = sum(info.file_size for info, _ in members)
        if declared > max_bytes:
            raise UserError(
                f"archive {archive} declares {_size(declared)} uncompressed, over the cap of {_size(max_bytes)}; "
                f"nothing was extracted. If you trust it, raise paper.max_extract_mb in params.yaml"
            )
        with atomic_dir(target) as tmp:  # also removes a killed earlier extraction's half-written folder
            _extract(zf, members, tmp, archive, max_bytes)
    return target


def _checked_members(zf: zipfile.ZipFile, archive: Path) -> list[tuple[zipfile.ZipInfo, tuple[str, ...]]]:
    """Returns (member, path parts) for every member worth extracting, or raises on the first unsafe one."""

    def unsafe(name: str, why: str) -> UserError:
        return UserError(f"archive {archive} is unsafe and was not extracted: member {name!r} {why}")

    members, seen = [], set()
    for info in zf.infolist():
        name = info.filename
        mode = info.external_attr >> 16  # unix st_mode, when the archiver recorded one
        if "\\" in name:
            raise unsafe(name, "contains a backslash")
        if name.startswith("/"):
            raise unsafe(name, "is an absolute path")
        if re.match(r"[A-Za-z]:", name):
            raise unsafe(name, "starts with a drive letter")
        parts = tuple(part for part in name.split("/") if part not in ("", "."))
        if ".." in parts:
            raise unsafe(name, "has a '..' component that points outside the target")
        if stat.S_ISLNK(mode):
            raise unsafe(name, "is a symlink")
        if stat.S_IFMT(mode) not in (0, stat.S_IFREG, stat.S_IFDIR):
            raise unsafe(name, f"is a special file (mode {oct(mode)})")
        if info.flag_bits & 0x1:
            raise unsafe(name, "is encrypted")
        if not parts or parts[0] == "__MACOSX" or parts[-1] == ".DS_Store":
            continue
        if not info.is_dir():
            if parts in seen:
                raise unsafe(name, "appears twice")
            seen.add(parts)
        members.append((info, parts))
    return members


def _extract(
    zf: zipfile.ZipFile, members: list[tuple[zipfile.ZipInfo, tuple[str, ...]]], root: Path, archive: Path, cap: int
) -> None:
    total = 0
    for info, parts in members:
        path = root.joinpath(*parts)
        if info.is_dir():
            path.mkdir(parents=True, exist_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        written = 0
        try:
            with zf.open(info) as src, open(path, "xb") as out:
                while chunk := src.read(_CHUNK):
                    written += len(chunk)
                    total += len(chunk)
                    if written > info.file_size or total > cap:
                        raise UserError(
                            f"archive {archive} is unsafe and was not extracted: member {info.filename!r} unpacks "
                            f"to more than its header says ({written:,} > {info.file_size:,} bytes) or past the "
                            f"cap of {_size(cap)}; if you trust it, raise paper.max_extract_mb in params.yaml"
                        )
                    out.write(chunk)
        except (zipfile.BadZipFile, zlib.error, EOFError) as error:
            raise UserError(
                f"archive {archive} is corrupt (member {info.filename!r}: {error}); delete it and rerun"
            ) from None
        except NotImplementedError as error:
            raise UserError(
                f"archive {archive} uses a compression Python cannot read ({error}); extract it yourself and "
                f"point paper.folder in params.yaml at the result"
            ) from None


def _size(n: int) -> str:
    return f"{n:,} bytes ({n / 2**20:.1f} MiB)"


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
    if dest.is_dir() and all((dest / name).is_file() and sha256_file(dest / name) == h for name, h in files.items()):
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
        print(f"warning: {debian_problem}; trying torchvision's mirrors instead", file=sys.stderr)
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
            _transfer(url, gz, retries=_MIRROR_RETRIES, backoff_s=_MIRROR_BACKOFF_S, progress=True, timeout_s=30.0)
            actual = _decompress_to(gz, out)
        except _Unreachable as error:
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
            while chunk := f.read(_CHUNK):
                written += len(chunk)
                if written > _MAX_IDX_BYTES:
                    raise _CorruptFile(f"it unpacks to more than {_size(_MAX_IDX_BYTES)}")
                digest.update(chunk)
                o.write(chunk)
    except (gzip.BadGzipFile, EOFError, zlib.error) as error:
        raise _CorruptFile(_describe(error)) from None
    return digest.hexdigest()
