"""Getting files from the network safely: verified downloads with retries, and safe unzipping.

Every function here either produces a complete, verified result or leaves nothing behind: files and folders are
built under a temporary name beside their destination and renamed into place only once they are known good, so
a failed or interrupted run is never mistaken for a finished one on the next run.
"""

from __future__ import annotations

import http.client
import os
import re
import stat
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
import zipfile
import zlib
from pathlib import Path

from pipeline.core.config import url_problem
from pipeline.core.errors import UserError
from pipeline.core.files import atomic_dir, file_sha256, remove_stale_temps, temp_prefix

CHUNK = 1 << 20
_USER_AGENT = "vit-data-hunger (python urllib)"
# Defaults for downloads without a params.yaml section (the tools); the paper preset's stages pass
# paper.max_download_mb and paper.download_deadline_s.
MAX_BYTES = 1 << 30
DEADLINE_S = 1800.0


class Unreachable(UserError):
    """Every attempt at a URL failed with a transient (network or 5xx) error."""


class TooLarge(UserError):
    """A download announced or sent more bytes than its cap; not retried."""


class TooSlow(UserError):
    """A download (all its attempts) did not finish by its deadline; not retried."""


class _DeadlinePassed(TimeoutError):
    """Raised between reads once the deadline has passed."""


def download(
    url: str,
    dest: Path,
    sha256: str,
    *,
    retries: int = 3,
    backoff_s: float = 1.0,
    progress: bool = True,
    timeout_s: float = 30.0,
    max_bytes: int = MAX_BYTES,
    deadline_s: float = DEADLINE_S,
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
        max_bytes: The most bytes accepted: a larger Content-Length is refused before the body is read, and a
            body that runs past it (no length, or a lie) is cut off there (``paper.max_download_mb``).
        deadline_s: The whole download, every attempt and wait, ends by then: a server that sends a byte
            every few seconds never trips the per-read timeout (``paper.download_deadline_s``).

    Returns:
        ``dest``.

    Raises:
        UserError: A bad URL or hash, an unreachable server, an HTTP error, a hash mismatch, a download over
            ``max_bytes`` (:class:`TooLarge`) or past ``deadline_s`` (:class:`TooSlow`); the partial file is
            removed.
    """
    if retries < 1:
        raise ValueError(f"retries must be at least 1, got {retries}")
    dest = Path(dest)
    expected = _check_sha256(sha256)
    _check_url(url)
    if dest.is_file() and file_sha256(dest).startswith(expected):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(dest.parent)  # a killed earlier download's partial file
    # Not mkstemp: its 0600 mode would follow the file into place and hide a shared data folder from others.
    tmp = dest.with_name(f"{temp_prefix(dest)}{uuid.uuid4().hex}.partial")
    try:
        transfer(url, tmp, retries=retries, backoff_s=backoff_s, progress=progress, timeout_s=timeout_s,
                 max_bytes=max_bytes, deadline_s=deadline_s)  # fmt: skip
        actual = file_sha256(tmp)
        if not actual.startswith(expected):
            raise _mismatch(url, expected, actual, tmp.stat().st_size)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return dest


def _mismatch(url: str, expected: str, actual: str, size: int) -> UserError:
    wanted = expected if len(expected) == 64 else f"a hash starting with {expected}"
    return UserError(
        f"sha256 mismatch for {url}: expected {wanted}, got {actual} ({size:,} bytes "
        f"downloaded); nothing was saved. If the file changed upstream and you trust it, check it yourself "
        f"(e.g. `sha256sum FILE`) and set the new hash in params.yaml"
    )


def _check_sha256(sha256: str) -> str:
    if not isinstance(sha256, str) or re.fullmatch(r"[0-9a-fA-F]{8,64}", sha256) is None:
        raise UserError(f"sha256 {sha256!r} is not a sha256 or a prefix of one; give 8 to 64 hex digits in params.yaml")
    return sha256.lower()


def _check_url(url: str) -> None:
    problem = url_problem(url)
    if problem is not None:
        raise UserError(f"URL {url!r} cannot be fetched: {problem}; fix the URL in params.yaml")
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme == "file":
        # A missing local file is not transient, so it must not be retried like a network error.
        path = Path(urllib.request.url2pathname(parsed.path))
        if not path.is_file():
            raise UserError(f"{url} points to {path}, which is not a file; fix the URL in params.yaml")


def transfer(
    url: str, path: Path, *, retries: int, backoff_s: float, progress: bool, timeout_s: float,
    max_bytes: int = MAX_BYTES, deadline_s: float = DEADLINE_S,
) -> None:  # fmt: skip
    """Writes the bytes at ``url`` to ``path``, retrying transient failures within ``deadline_s``; no hash
    check. Over ``max_bytes`` or past the deadline it raises at once, and ``path`` is removed."""
    deadline = time.monotonic() + deadline_s
    last = ""
    server_error = False
    try:
        for attempt in range(1, retries + 1):
            try:
                _transfer_once(url, path, progress=progress, timeout_s=timeout_s, max_bytes=max_bytes,
                               deadline=deadline)  # fmt: skip
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
                last, server_error = describe_error(error.reason), False
            except _DeadlinePassed:
                raise _too_slow(url, deadline_s, path, "still arriving") from None
            except (http.client.HTTPException, TimeoutError, ConnectionError) as error:
                last, server_error = describe_error(error), False
            wait = backoff_s * 2 ** (attempt - 1)
            if time.monotonic() + (wait if attempt < retries else 0) >= deadline:
                raise _too_slow(url, deadline_s, path, f"last error: {last}")
            if attempt < retries:
                time.sleep(wait)
    except UserError:
        path.unlink(missing_ok=True)
        raise
    path.unlink(missing_ok=True)
    if server_error:
        raise Unreachable(
            f"{url} kept failing after {retries} attempts (last: {last}); the server has a problem, "
            f"rerun later to retry (or check your internet connection or proxy)"
        )
    raise Unreachable(
        f"could not reach {url} after {retries} attempts ({last}); check your internet connection or proxy, "
        f"then rerun to retry"
    )


def _too_slow(url: str, deadline_s: float, path: Path, detail: str) -> TooSlow:
    got = path.stat().st_size if path.is_file() else 0
    return TooSlow(
        f"{url} did not finish downloading within the deadline of {deadline_s:g} s ({got:,} bytes received, "
        f"{detail}); nothing was saved. The server is stalled or too slow: rerun later, or raise "
        "paper.download_deadline_s in params.yaml for a slow connection"
    )


def _too_large(url: str, max_bytes: int, what: str) -> TooLarge:
    return TooLarge(
        f"{url} {what}, over the download cap of {byte_size(max_bytes)}; nothing was saved. Check the URL, or if "
        "you trust the file, raise paper.max_download_mb in params.yaml"
    )


def _set_read_timeout(response, seconds: float) -> None:
    """The socket timeout of ``response``'s next read (http.client keeps the socket in ``fp.raw._sock``), so
    the last read before the deadline waits no longer than the time left; a file URL has no socket."""
    sock = getattr(getattr(response.fp, "raw", None), "_sock", None)
    if sock is not None:
        sock.settimeout(seconds)


def _transfer_once(url: str, path: Path, *, progress: bool, timeout_s: float, max_bytes: int, deadline: float) -> None:
    # torch.hub.download_url_to_file would give the same progress bar, but it cannot take a timeout and silently
    # keeps a truncated body (http.client returns b"" at an early close), which would surface as a misleading
    # hash mismatch instead of a retried transfer.
    from torch.hub import tqdm  # tqdm, or torch's fallback when it is not installed

    request = urllib.request.Request(url, headers={"User-Agent": _USER_AGENT})
    left = deadline - time.monotonic()
    with urllib.request.urlopen(request, timeout=max(min(timeout_s, left), 0.01)) as response, open(path, "wb") as f:
        length = response.headers.get("Content-Length")
        expected = int(length) if length and length.isdigit() else None
        if expected is not None and expected > max_bytes:
            raise _too_large(url, max_bytes, f"announces {byte_size(expected)}")
        written = 0
        # disable=None: a bar on a terminal only, so logs and CI keep one line per event
        disable = None if progress else True
        with tqdm(total=expected, disable=disable, unit="B", unit_scale=True, unit_divisor=1024) as bar:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise _DeadlinePassed
                _set_read_timeout(response, min(timeout_s, left))
                # read1: what has arrived, at most CHUNK; read(CHUNK) would wait for the whole chunk, byte by byte
                chunk = response.read1(CHUNK)
                if not chunk:
                    break
                written += len(chunk)
                if written > max_bytes:
                    raise _too_large(url, max_bytes, "sends more than that")
                f.write(chunk)
                bar.update(len(chunk))
    if expected is not None and written != expected:
        raise ConnectionError(f"transfer cut short: got {written:,} of {expected:,} bytes")


def describe_error(error: object) -> str:
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
                f"archive {archive} declares {byte_size(declared)} uncompressed, "
                f"over the cap of {byte_size(max_bytes)}; "
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
                while chunk := src.read(CHUNK):
                    written += len(chunk)
                    total += len(chunk)
                    if written > info.file_size or total > cap:
                        raise UserError(
                            f"archive {archive} is unsafe and was not extracted: member {info.filename!r} unpacks "
                            f"to more than its header says ({written:,} > {info.file_size:,} bytes) or past the "
                            f"cap of {byte_size(cap)}; if you trust it, raise paper.max_extract_mb in params.yaml"
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


def byte_size(n: int) -> str:
    return f"{n:,} bytes ({n / 2**20:.1f} MiB)"
