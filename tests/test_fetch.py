"""pipeline.fetch: verified downloads against a loopback server, safe unzipping, IDX reading, Fashion-MNIST sources."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import socket
import stat
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
from loopback import running_server

from pipeline import fetch
from pipeline.errors import UserError

PAYLOAD = b"vision transformer " * 1000


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tree(root: Path) -> set[str]:
    """Every file and folder under ``root``, relative, so a test can see exactly what was left behind."""
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.fixture
def server():
    with running_server() as s:
        yield s


@pytest.fixture
def dead_url() -> str:
    """A loopback URL with nothing listening, so connecting is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/file.bin"


@pytest.fixture
def sleeps(monkeypatch) -> list[float]:
    """Records the backoff waits instead of sleeping through them."""
    waits: list[float] = []
    monkeypatch.setattr(fetch.time, "sleep", waits.append)
    return waits


# --- download -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("pin", [sha(PAYLOAD), sha(PAYLOAD)[:8], sha(PAYLOAD).upper()], ids=["full", "prefix", "upper"])
def test_download_verifies_full_hash_or_prefix(server, tmp_path, pin):
    server.routes["/f.bin"] = [("ok", PAYLOAD)]
    dest = tmp_path / "sub" / "f.bin"
    assert fetch.download(server.url("/f.bin"), dest, pin, progress=False) == dest
    assert dest.read_bytes() == PAYLOAD
    assert tree(tmp_path) == {"sub", "sub/f.bin"}  # no temporary file left beside it


def test_download_file_url(tmp_path):
    src = tmp_path / "src.bin"
    src.write_bytes(PAYLOAD)
    dest = fetch.download(src.as_uri(), tmp_path / "out" / "f.bin", sha(PAYLOAD), progress=False)
    assert dest.read_bytes() == PAYLOAD


def test_download_missing_file_url_fails_at_once(tmp_path, sleeps):
    with pytest.raises(UserError, match="not a file"):
        fetch.download((tmp_path / "nope.bin").as_uri(), tmp_path / "f.bin", sha(PAYLOAD), progress=False)
    assert sleeps == []


def test_download_cache_hit_makes_no_request(server, tmp_path):
    server.routes["/f.bin"] = [("ok", PAYLOAD)]
    dest = tmp_path / "f.bin"
    dest.write_bytes(PAYLOAD)
    fetch.download(server.url("/f.bin"), dest, sha(PAYLOAD)[:8], progress=False)
    assert server.hits["/f.bin"] == 0


def test_download_replaces_dest_with_wrong_hash(server, tmp_path):
    server.routes["/f.bin"] = [("ok", PAYLOAD)]
    dest = tmp_path / "f.bin"
    dest.write_bytes(b"stale")
    fetch.download(server.url("/f.bin"), dest, sha(PAYLOAD), progress=False)
    assert dest.read_bytes() == PAYLOAD
    assert server.hits["/f.bin"] == 1


def test_download_404_fails_at_once(server, tmp_path, sleeps):
    dest = tmp_path / "f.bin"
    with pytest.raises(UserError, match="404") as error:
        fetch.download(server.url("/missing.bin"), dest, sha(PAYLOAD), progress=False)
    assert "params.yaml" in str(error.value)
    assert server.hits["/missing.bin"] == 1
    assert sleeps == []
    assert tree(tmp_path) == set()


def test_download_403_is_not_retried(server, tmp_path):
    server.routes["/f.bin"] = [("status", 403)]
    with pytest.raises(UserError, match="403"):
        fetch.download(server.url("/f.bin"), tmp_path / "f.bin", sha(PAYLOAD), progress=False)
    assert server.hits["/f.bin"] == 1


def test_download_retries_5xx_with_exponential_backoff(server, tmp_path, sleeps):
    server.routes["/f.bin"] = [("status", 500), ("status", 503), ("ok", PAYLOAD)]
    dest = fetch.download(server.url("/f.bin"), tmp_path / "f.bin", sha(PAYLOAD), backoff_s=0.01, progress=False)
    assert dest.read_bytes() == PAYLOAD
    assert server.hits["/f.bin"] == 3
    assert sleeps == [0.01, 0.02]


def test_download_gives_up_on_persistent_5xx(server, tmp_path, sleeps):
    server.routes["/f.bin"] = [("status", 502)]
    with pytest.raises(UserError, match="502"):
        fetch.download(server.url("/f.bin"), tmp_path / "f.bin", sha(PAYLOAD), retries=2, progress=False)
    assert server.hits["/f.bin"] == 2
    assert tree(tmp_path) == set()


def test_download_connection_refused(dead_url, tmp_path, sleeps):
    with pytest.raises(UserError) as error:
        fetch.download(dead_url, tmp_path / "f.bin", sha(PAYLOAD), retries=4, backoff_s=0.5, progress=False)
    message = str(error.value)
    assert dead_url in message and "internet connection" in message and "4 attempts" in message
    assert sleeps == [0.5, 1.0, 2.0]  # four attempts, three doubling waits
    assert tree(tmp_path) == set()


def test_download_times_out_on_a_silent_server(server, tmp_path, sleeps):
    server.routes["/f.bin"] = [("hang", 2.0)]
    start = time.monotonic()
    with pytest.raises(UserError, match="timed out"):
        fetch.download(server.url("/f.bin"), tmp_path / "f.bin", sha(PAYLOAD), retries=1, timeout_s=0.2, progress=False)
    assert time.monotonic() - start < 1.5


@pytest.mark.parametrize("url", ["ftp://example.invalid/f.bin", "/tmp/f.bin", "data/f.bin", "http:///f.bin"])
def test_download_rejects_unsupported_urls(tmp_path, url):
    with pytest.raises(UserError, match="params.yaml"):
        fetch.download(url, tmp_path / "f.bin", sha(PAYLOAD), progress=False)


@pytest.mark.parametrize("pin", ["abc", "", "z" * 64, "0" * 65], ids=["short", "empty", "not-hex", "too-long"])
def test_download_rejects_bad_pins(server, tmp_path, pin):
    server.routes["/f.bin"] = [("ok", PAYLOAD)]
    with pytest.raises(UserError, match="hex digits"):
        fetch.download(server.url("/f.bin"), tmp_path / "f.bin", pin, progress=False)
    assert server.hits["/f.bin"] == 0


def test_download_retries_truncated_transfer(server, tmp_path, sleeps):
    server.routes["/f.bin"] = [("truncate", PAYLOAD), ("ok", PAYLOAD)]
    dest = fetch.download(server.url("/f.bin"), tmp_path / "f.bin", sha(PAYLOAD), progress=False)
    assert dest.read_bytes() == PAYLOAD
    assert server.hits["/f.bin"] == 2


def test_download_persistently_truncated_leaves_nothing(server, tmp_path, sleeps):
    server.routes["/f.bin"] = [("truncate", PAYLOAD)]
    with pytest.raises(UserError, match="cut short"):
        fetch.download(server.url("/f.bin"), tmp_path / "f.bin", sha(PAYLOAD), retries=2, progress=False)
    assert server.hits["/f.bin"] == 2
    assert tree(tmp_path) == set()


def test_download_hash_mismatch(server, tmp_path, sleeps):
    server.routes["/f.bin"] = [("ok", b"tampered")]
    with pytest.raises(UserError) as error:
        fetch.download(server.url("/f.bin"), tmp_path / "f.bin", sha(PAYLOAD), progress=False)
    message = str(error.value)
    assert sha(PAYLOAD) in message and sha(b"tampered") in message
    assert "8 bytes" in message and "params.yaml" in message and "sha256sum" in message
    assert server.hits["/f.bin"] == 1  # a mismatch is not transient
    assert tree(tmp_path) == set()


@pytest.mark.parametrize("answer", [("ok", b"changed upstream"), ("status", 404), ("truncate", PAYLOAD)])
def test_download_failure_keeps_existing_dest(server, tmp_path, sleeps, answer):
    # The old file verifies against the old pin only; asking for a new pin forces a re-download that fails.
    dest = tmp_path / "f.bin"
    dest.write_bytes(b"old but good")
    server.routes["/f.bin"] = [answer]
    with pytest.raises(UserError):
        fetch.download(server.url("/f.bin"), dest, sha(PAYLOAD), retries=2, progress=False)
    assert dest.read_bytes() == b"old but good"
    assert tree(tmp_path) == {"f.bin"}


def test_sha256_file_streams_large_files(tmp_path):
    data = np.random.default_rng(0).integers(0, 256, size=int(2.5 * (1 << 20)), dtype=np.uint8).tobytes()
    path = tmp_path / "big.bin"
    path.write_bytes(data)
    assert fetch.sha256_file(path) == sha(data)


# --- safe_extract_zip -----------------------------------------------------------------------------------------


def make_zip(path: Path, members: list[tuple[str | zipfile.ZipInfo, bytes]], method=zipfile.ZIP_DEFLATED) -> Path:
    with zipfile.ZipFile(path, "w", compression=method) as zf:
        for name, data in members:
            zf.writestr(name, data)
    return path


def test_extract_normal_archive_skips_junk(tmp_path):
    archive = make_zip(
        tmp_path / "a.zip",
        [
            ("train/pizza/1.jpg", b"one"),
            ("train/", b""),
            ("./test/sushi/2.jpg", b"two"),
            ("__MACOSX/train/._1.jpg", b"junk"),
            ("train/.DS_Store", b"junk"),
        ],
    )
    target = tmp_path / "data" / "images"
    assert fetch.safe_extract_zip(archive, target, max_bytes=1000) == target
    assert tree(target) == {"train", "train/pizza", "train/pizza/1.jpg", "test", "test/sushi", "test/sushi/2.jpg"}
    assert (target / "test/sushi/2.jpg").read_bytes() == b"two"
    assert tree(tmp_path / "data") == {"images"} | {f"images/{p}" for p in tree(target)}


def test_extract_replaces_an_old_target(tmp_path):
    target = tmp_path / "images"
    (target / "stale").mkdir(parents=True)
    (target / "stale" / "old.jpg").write_bytes(b"old")
    archive = make_zip(tmp_path / "a.zip", [("new.jpg", b"new")])
    fetch.safe_extract_zip(archive, target, max_bytes=1000)
    assert tree(tmp_path) == {"a.zip", "images", "images/new.jpg"}


def symlink_member() -> zipfile.ZipInfo:
    info = zipfile.ZipInfo("link")
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info


@pytest.mark.parametrize(
    "name",
    ["../evil.txt", "good/../../evil.txt", "ABSOLUTE", "C:/evil.txt", "..\\evil.txt", "SYMLINK"],
)
def test_extract_rejects_unsafe_members(tmp_path, name):
    if name == "ABSOLUTE":
        name = str(tmp_path / "evil.txt")
    member = symlink_member() if name == "SYMLINK" else name
    archive = make_zip(tmp_path / "a.zip", [("ok.txt", b"fine"), (member, b"../../evil.txt")])
    target = tmp_path / "out" / "images"
    with pytest.raises(UserError, match="unsafe and was not extracted") as error:
        fetch.safe_extract_zip(archive, target, max_bytes=1000)
    assert repr(member.filename if isinstance(member, zipfile.ZipInfo) else name) in str(error.value)
    if isinstance(member, zipfile.ZipInfo):
        assert "symlink" in str(error.value)
    assert tree(tmp_path) == {"a.zip"}  # not even ok.txt, nor an out/ folder


def test_extract_rejects_declared_size_over_cap_before_extracting(tmp_path, monkeypatch):
    archive = make_zip(tmp_path / "a.zip", [("big.bin", b"\0" * 5000)])

    def no_open(*args, **kwargs):
        raise AssertionError("extraction started before the size check")

    monkeypatch.setattr(zipfile.ZipFile, "open", no_open)
    with pytest.raises(UserError, match="paper.max_extract_mb") as error:
        fetch.safe_extract_zip(archive, tmp_path / "images", max_bytes=4000)
    assert "5,000 bytes" in str(error.value) and "4,000 bytes" in str(error.value)
    assert tree(tmp_path) == {"a.zip"}


def test_extract_counts_bytes_when_the_header_lies(tmp_path, monkeypatch):
    # zipfile itself stops at the declared size, so the lie is simulated at the stream it returns.
    archive = make_zip(tmp_path / "a.zip", [("small.bin", b"x" * 10)])
    monkeypatch.setattr(zipfile.ZipFile, "open", lambda self, info, *a, **k: io.BytesIO(b"x" * 5000))
    with pytest.raises(UserError, match="more than its header says"):
        fetch.safe_extract_zip(archive, tmp_path / "images", max_bytes=1000)
    assert tree(tmp_path) == {"a.zip"}


def test_extract_rejects_random_bytes(tmp_path):
    archive = tmp_path / "a.zip"
    archive.write_bytes(os.urandom(2000))
    with pytest.raises(UserError, match="corrupt.*delete it and rerun"):
        fetch.safe_extract_zip(archive, tmp_path / "images", max_bytes=10_000)
    assert tree(tmp_path) == {"a.zip"}


def test_extract_rejects_corrupt_member_data_midway(tmp_path):
    payload = b"A" * 100 + b"needle" + b"B" * 100
    archive = make_zip(tmp_path / "a.zip", [("first.txt", b"fine"), ("second.txt", payload)], zipfile.ZIP_STORED)
    raw = archive.read_bytes()
    archive.write_bytes(raw.replace(b"needle", b"NEEDLE"))  # stored data no longer matches its CRC
    with pytest.raises(UserError, match="corrupt"):
        fetch.safe_extract_zip(archive, tmp_path / "images", max_bytes=10_000)
    assert tree(tmp_path) == {"a.zip"}


@pytest.mark.parametrize("had_old_target", [False, True])
def test_interrupted_extraction_leaves_no_new_target(tmp_path, monkeypatch, had_old_target):
    target = tmp_path / "images"
    if had_old_target:
        target.mkdir()
        (target / "old.jpg").write_bytes(b"old")
    archive = make_zip(tmp_path / "a.zip", [("1.jpg", b"one"), ("2.jpg", b"two"), ("3.jpg", b"three")])
    real_open = zipfile.ZipFile.open
    opened = []

    def open_then_interrupt(self, info, *args, **kwargs):
        opened.append(info)
        if len(opened) == 2:
            raise KeyboardInterrupt
        return real_open(self, info, *args, **kwargs)

    monkeypatch.setattr(zipfile.ZipFile, "open", open_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        fetch.safe_extract_zip(archive, target, max_bytes=1000)
    expected = {"a.zip", "images", "images/old.jpg"} if had_old_target else {"a.zip"}
    assert tree(tmp_path) == expected


# --- read_idx -------------------------------------------------------------------------------------------------


def idx_bytes(array: np.ndarray) -> bytes:
    magic = {1: 0x00000801, 3: 0x00000803}[array.ndim]
    dims = b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    return magic.to_bytes(4, "big") + dims + array.astype(np.uint8).tobytes()


@pytest.mark.parametrize("compressed", [False, True])
def test_read_idx_round_trip(tmp_path, compressed):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(7, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, size=7, dtype=np.uint8)
    for name, array in (("images", images), ("labels", labels)):
        data = idx_bytes(array)
        # The suffix deliberately contradicts the content: detection must go by the gzip magic bytes.
        path = tmp_path / (name if compressed else f"{name}.gz")
        path.write_bytes(gzip.compress(data) if compressed else data)
        got = fetch.read_idx(path)
        assert got.dtype == np.uint8 and got.shape == array.shape
        np.testing.assert_array_equal(got, array)
        got[0] = 1  # writable, like torchvision's tensors built from it
    assert fetch.read_idx(tmp_path / ("images" if compressed else "images.gz")).shape == (7, 28, 28)


@pytest.mark.parametrize(
    ("mangle", "why"),
    [
        (lambda d: b"\x12\x34" + d[2:], "magic number"),
        (lambda d: d[:2] + b"\x0d" + d[3:], "dtype code 0x0d"),
        (lambda d: d[:3] + b"\x02" + d[4:], "magic number 0x00000802"),
        (lambda d: d[:-1], "payload"),
        (lambda d: d + b"\0", "payload"),
        (lambda d: d[:2], "too short"),
        (lambda d: d[:10], "too short"),
        (lambda d: gzip.compress(d)[:30], "gzip"),
    ],
)
def test_read_idx_rejects_malformed_files(tmp_path, mangle, why):
    path = tmp_path / "images.idx"
    path.write_bytes(mangle(idx_bytes(np.zeros((3, 4, 5), np.uint8))))
    with pytest.raises(UserError, match=why) as error:
        fetch.read_idx(path)
    assert str(path) in str(error.value) and "delete it and rerun the download stage" in str(error.value)


# --- obtain_fashion_mnist -------------------------------------------------------------------------------------


@pytest.fixture
def fmnist() -> dict[str, bytes]:
    """Tiny stand-ins for the four Fashion-MNIST files: name -> uncompressed IDX bytes."""
    rng = np.random.default_rng(0)
    return {
        "train-images-idx3-ubyte": idx_bytes(rng.integers(0, 256, size=(20, 28, 28), dtype=np.uint8)),
        "train-labels-idx1-ubyte": idx_bytes(rng.integers(0, 10, size=20, dtype=np.uint8)),
        "t10k-images-idx3-ubyte": idx_bytes(rng.integers(0, 256, size=(10, 28, 28), dtype=np.uint8)),
        "t10k-labels-idx1-ubyte": idx_bytes(rng.integers(0, 10, size=10, dtype=np.uint8)),
    }


def pins(files: dict[str, bytes]) -> dict[str, str]:
    return {name: sha(data) for name, data in files.items()}


def debian_dir(root: Path, files: dict[str, bytes], *, compressed: bool = True) -> Path:
    folder = root / "debian"
    folder.mkdir()
    for name, data in files.items():
        (folder / (f"{name}.gz" if compressed else name)).write_bytes(gzip.compress(data) if compressed else data)
    return folder


def assert_dataset(dest: Path, files: dict[str, bytes]) -> None:
    assert tree(dest) == set(files)
    for name, data in files.items():
        assert (dest / name).read_bytes() == data


@pytest.fixture
def fast_mirrors(monkeypatch):
    monkeypatch.setattr(fetch, "_MIRROR_RETRIES", 2)
    monkeypatch.setattr(fetch, "_MIRROR_BACKOFF_S", 0.01)


@pytest.mark.parametrize("compressed", [True, False])
def test_obtain_from_debian(tmp_path, fmnist, compressed):
    debian = debian_dir(tmp_path, fmnist, compressed=compressed)
    dest = tmp_path / "data" / "fashion-mnist"
    assert fetch.obtain_fashion_mnist(dest, debian_dir=debian, mirror=False, files=pins(fmnist), mirrors=()) == dest
    assert_dataset(dest, fmnist)
    assert tree(tmp_path / "data") == {"fashion-mnist"} | {f"fashion-mnist/{n}" for n in fmnist}
    assert fetch.read_idx(dest / "train-images-idx3-ubyte").shape == (20, 28, 28)
    assert fetch.read_idx(dest / "t10k-labels-idx1-ubyte").shape == (10,)


def test_obtain_reuses_a_verified_dest(tmp_path, fmnist):
    dest = tmp_path / "fashion-mnist"
    fetch.obtain_fashion_mnist(dest, debian_dir=debian_dir(tmp_path, fmnist), mirror=False, files=pins(fmnist))
    # With every source gone, only the verified dest can satisfy the call.
    fetch.obtain_fashion_mnist(dest, debian_dir=tmp_path / "gone", mirror=False, files=pins(fmnist), mirrors=())
    assert_dataset(dest, fmnist)


def test_obtain_rebuilds_a_damaged_dest(tmp_path, fmnist):
    dest = tmp_path / "fashion-mnist"
    dest.mkdir()
    (dest / "train-labels-idx1-ubyte").write_bytes(b"half written")
    (dest / "leftover").write_bytes(b"x")
    fetch.obtain_fashion_mnist(dest, debian_dir=debian_dir(tmp_path, fmnist), mirror=False, files=pins(fmnist))
    assert_dataset(dest, fmnist)


def test_obtain_from_mirror_when_debian_is_missing(server, tmp_path, fmnist):
    for name, data in fmnist.items():
        server.routes[f"/fm/{name}.gz"] = [("ok", gzip.compress(data))]
    dest = tmp_path / "fashion-mnist"
    mirrors = (server.url("/down/"), server.url("/fm/"))  # the first mirror answers 404 for everything
    fetch.obtain_fashion_mnist(dest, debian_dir=tmp_path / "none", mirror=True, files=pins(fmnist), mirrors=mirrors)
    assert_dataset(dest, fmnist)
    assert all(server.hits[f"/fm/{name}.gz"] == 1 for name in fmnist)
    assert tree(tmp_path) == {"fashion-mnist"} | {f"fashion-mnist/{n}" for n in fmnist}


def test_obtain_skips_an_unreachable_mirror_after_the_first_file(
    server, dead_url, tmp_path, fmnist, fast_mirrors, monkeypatch
):
    for name, data in fmnist.items():
        server.routes[f"/{name}.gz"] = [("ok", gzip.compress(data))]
    dead = dead_url.rsplit("/", 1)[0] + "/"
    tried = []
    real = fetch._transfer_once
    monkeypatch.setattr(fetch, "_transfer_once", lambda url, *a, **k: tried.append(url) or real(url, *a, **k))
    files, mirrors = pins(fmnist), (dead, server.url("/"))
    fetch.obtain_fashion_mnist(tmp_path / "fm", debian_dir=tmp_path / "none", mirror=True, files=files, mirrors=mirrors)
    assert_dataset(tmp_path / "fm", fmnist)
    first = next(iter(fmnist))
    assert [url for url in tried if url.startswith(dead)] == [f"{dead}{first}.gz"] * 2  # _MIRROR_RETRIES, then skipped


def test_obtain_mixes_debian_and_mirror(server, tmp_path, fmnist):
    debian = debian_dir(tmp_path, {k: v for k, v in fmnist.items() if "train" in k})
    for name, data in fmnist.items():
        server.routes[f"/{name}.gz"] = [("ok", gzip.compress(data))]
    dest = tmp_path / "fashion-mnist"
    fetch.obtain_fashion_mnist(dest, debian_dir=debian, mirror=True, files=pins(fmnist), mirrors=(server.url("/"),))
    assert_dataset(dest, fmnist)
    assert {path for path, n in server.hits.items() if n} == {f"/{n}.gz" for n in fmnist if "t10k" in n}


def test_obtain_with_no_source_names_both_fixes(tmp_path, fmnist):
    dest = tmp_path / "data" / "fashion-mnist"
    with pytest.raises(UserError) as error:
        fetch.obtain_fashion_mnist(dest, debian_dir=tmp_path / "none", mirror=False, files=pins(fmnist))
    message = str(error.value)
    assert "sudo apt-get install dataset-fashion-mnist" in message
    assert "internet connection" in message and "offline.mirror: true" in message
    assert str(tmp_path / "none") in message
    assert "\n" not in message
    assert tree(tmp_path) == set()


def test_obtain_with_unreachable_mirror_names_both_fixes(dead_url, tmp_path, fmnist, fast_mirrors):
    dest = tmp_path / "fashion-mnist"
    mirror = dead_url.rsplit("/", 1)[0] + "/"
    with pytest.raises(UserError) as error:
        fetch.obtain_fashion_mnist(
            dest, debian_dir=tmp_path / "none", mirror=True, files=pins(fmnist), mirrors=(mirror,)
        )
    message = str(error.value)
    assert "apt-get install dataset-fashion-mnist" in message and "offline.mirror: true" in message
    assert "internet connection" in message and mirror in message
    assert tree(tmp_path) == set()


def test_obtain_corrupt_debian_file_without_mirror(tmp_path, fmnist):
    debian = debian_dir(tmp_path, fmnist)
    bad = debian / "t10k-images-idx3-ubyte.gz"
    bad.write_bytes(gzip.compress(b"not the real file"))
    dest = tmp_path / "fashion-mnist"
    with pytest.raises(UserError) as error:
        fetch.obtain_fashion_mnist(dest, debian_dir=debian, mirror=False, files=pins(fmnist))
    message = str(error.value)
    assert str(bad) in message and "apt-get install --reinstall dataset-fashion-mnist" in message
    assert sha(fmnist["t10k-images-idx3-ubyte"]) in message and sha(b"not the real file") in message
    assert not dest.exists() and tree(tmp_path) == {"debian"} | {f"debian/{n}.gz" for n in fmnist}


def test_obtain_unreadable_gzip_in_debian_dir(tmp_path, fmnist):
    debian = debian_dir(tmp_path, fmnist)
    (debian / "train-labels-idx1-ubyte.gz").write_bytes(b"\x1f\x8b" + b"garbage" * 10)
    with pytest.raises(UserError, match="corrupt.*--reinstall"):
        fetch.obtain_fashion_mnist(tmp_path / "fm", debian_dir=debian, mirror=False, files=pins(fmnist))
    assert not (tmp_path / "fm").exists()


def test_obtain_corrupt_debian_file_falls_back_to_mirror(server, tmp_path, fmnist, capsys):
    debian = debian_dir(tmp_path, fmnist)
    (debian / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(b"bit rot"))
    server.routes["/train-images-idx3-ubyte.gz"] = [("ok", gzip.compress(fmnist["train-images-idx3-ubyte"]))]
    dest = tmp_path / "fashion-mnist"
    fetch.obtain_fashion_mnist(dest, debian_dir=debian, mirror=True, files=pins(fmnist), mirrors=(server.url("/"),))
    assert_dataset(dest, fmnist)
    assert "warning:" in capsys.readouterr().err
    assert sum(server.hits.values()) == 1


def test_obtain_corrupt_debian_file_and_bad_mirror(server, tmp_path, fmnist, fast_mirrors):
    debian = debian_dir(tmp_path, fmnist)
    (debian / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(b"bit rot"))
    server.routes["/train-images-idx3-ubyte.gz"] = [("ok", gzip.compress(b"also wrong"))]
    dest = tmp_path / "fashion-mnist"
    with pytest.raises(UserError, match="--reinstall dataset-fashion-mnist.*mirrors failed too") as error:
        fetch.obtain_fashion_mnist(dest, debian_dir=debian, mirror=True, files=pins(fmnist), mirrors=(server.url("/"),))
    assert sha(b"also wrong") in str(error.value)
    assert not dest.exists()


REAL_DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")


@pytest.mark.skipif(
    not REAL_DEBIAN_DIR.is_dir(), reason=f"{REAL_DEBIAN_DIR} missing: apt-get install dataset-fashion-mnist"
)
def test_obtain_real_debian_fashion_mnist(tmp_path):
    dest = fetch.obtain_fashion_mnist(tmp_path / "fashion-mnist", debian_dir=REAL_DEBIAN_DIR, mirror=False)
    assert tree(dest) == set(fetch.FASHION_MNIST_FILES)
    for split, n in (("train", 60000), ("t10k", 10000)):
        images = fetch.read_idx(dest / f"{split}-images-idx3-ubyte")
        labels = fetch.read_idx(dest / f"{split}-labels-idx1-ubyte")
        assert images.shape == (n, 28, 28) and images.dtype == np.uint8
        assert labels.shape == (n,) and labels.dtype == np.uint8
        assert set(np.unique(labels)) == set(range(10))


def test_mirrors_match_torchvision():
    torchvision = pytest.importorskip("torchvision")
    assert tuple(torchvision.datasets.FashionMNIST.mirrors) == fetch.FASHION_MNIST_MIRRORS
