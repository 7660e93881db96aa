"""pipeline.data.presets.fashion_mnist: the IDX reader and the Debian/mirror sources, each file verified."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
from helpers import idx_bytes, sha, tree
from loopback import socket_closed_port

from pipeline.core.errors import UserError
from pipeline.data import fetch
from pipeline.data.presets import fashion_mnist
from pipeline.data.presets.fashion_mnist import obtain_fashion_mnist

# --- read_idx -------------------------------------------------------------------------------------------------


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
        got = fashion_mnist.read_idx(path)
        assert got.dtype == np.uint8 and got.shape == array.shape
        np.testing.assert_array_equal(got, array)
        got[0] = 1  # writable, like torchvision's tensors built from it
    assert fashion_mnist.read_idx(tmp_path / ("images" if compressed else "images.gz")).shape == (7, 28, 28)


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
        fashion_mnist.read_idx(path)
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
    monkeypatch.setattr(fashion_mnist, "_MIRROR_RETRIES", 2)
    monkeypatch.setattr(fashion_mnist, "_MIRROR_BACKOFF_S", 0.01)


@pytest.mark.parametrize("compressed", [True, False])
def test_obtain_from_debian(tmp_path, fmnist, compressed):
    debian = debian_dir(tmp_path, fmnist, compressed=compressed)
    dest = tmp_path / "data" / "fashion-mnist"
    assert obtain_fashion_mnist(dest, debian_dir=debian, mirror=False, files=pins(fmnist), mirrors=()) == dest
    assert_dataset(dest, fmnist)
    assert tree(tmp_path / "data") == {"fashion-mnist"} | {f"fashion-mnist/{n}" for n in fmnist}
    assert fashion_mnist.read_idx(dest / "train-images-idx3-ubyte").shape == (20, 28, 28)
    assert fashion_mnist.read_idx(dest / "t10k-labels-idx1-ubyte").shape == (10,)


def test_obtain_reuses_a_verified_dest(tmp_path, fmnist):
    dest = tmp_path / "fashion-mnist"
    obtain_fashion_mnist(dest, debian_dir=debian_dir(tmp_path, fmnist), mirror=False, files=pins(fmnist))
    # With every source gone, only the verified dest can satisfy the call.
    obtain_fashion_mnist(dest, debian_dir=tmp_path / "gone", mirror=False, files=pins(fmnist), mirrors=())
    assert_dataset(dest, fmnist)


def test_obtain_rebuilds_a_damaged_dest(tmp_path, fmnist):
    dest = tmp_path / "fashion-mnist"
    dest.mkdir()
    (dest / "train-labels-idx1-ubyte").write_bytes(b"half written")
    (dest / "leftover").write_bytes(b"x")
    obtain_fashion_mnist(dest, debian_dir=debian_dir(tmp_path, fmnist), mirror=False, files=pins(fmnist))
    assert_dataset(dest, fmnist)


def test_obtain_from_mirror_when_debian_is_missing(server, tmp_path, fmnist):
    for name, data in fmnist.items():
        server.routes[f"/fm/{name}.gz"] = [("ok", gzip.compress(data))]
    dest = tmp_path / "fashion-mnist"
    mirrors = (server.url("/down/"), server.url("/fm/"))  # the first mirror answers 404 for everything
    obtain_fashion_mnist(dest, debian_dir=tmp_path / "none", mirror=True, files=pins(fmnist), mirrors=mirrors)
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
    obtain_fashion_mnist(tmp_path / "fm", debian_dir=tmp_path / "none", mirror=True, files=files, mirrors=mirrors)
    assert_dataset(tmp_path / "fm", fmnist)
    first = next(iter(fmnist))
    assert [url for url in tried if url.startswith(dead)] == [f"{dead}{first}.gz"] * 2  # _MIRROR_RETRIES, then skipped


def test_obtain_mixes_debian_and_mirror(server, tmp_path, fmnist):
    debian = debian_dir(tmp_path, {k: v for k, v in fmnist.items() if "train" in k})
    for name, data in fmnist.items():
        server.routes[f"/{name}.gz"] = [("ok", gzip.compress(data))]
    dest = tmp_path / "fashion-mnist"
    obtain_fashion_mnist(dest, debian_dir=debian, mirror=True, files=pins(fmnist), mirrors=(server.url("/"),))
    assert_dataset(dest, fmnist)
    assert {path for path, n in server.hits.items() if n} == {f"/{n}.gz" for n in fmnist if "t10k" in n}


def test_obtain_with_no_source_names_both_fixes(tmp_path, fmnist):
    dest = tmp_path / "data" / "fashion-mnist"
    with pytest.raises(UserError) as error:
        obtain_fashion_mnist(dest, debian_dir=tmp_path / "none", mirror=False, files=pins(fmnist))
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
        obtain_fashion_mnist(dest, debian_dir=tmp_path / "none", mirror=True, files=pins(fmnist), mirrors=(mirror,))
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
        obtain_fashion_mnist(dest, debian_dir=debian, mirror=False, files=pins(fmnist))
    message = str(error.value)
    assert str(bad) in message and "apt-get install --reinstall dataset-fashion-mnist" in message
    assert sha(fmnist["t10k-images-idx3-ubyte"]) in message and sha(b"not the real file") in message
    assert not dest.exists() and tree(tmp_path) == {"debian"} | {f"debian/{n}.gz" for n in fmnist}


def test_obtain_unreadable_gzip_in_debian_dir(tmp_path, fmnist):
    debian = debian_dir(tmp_path, fmnist)
    (debian / "train-labels-idx1-ubyte.gz").write_bytes(b"\x1f\x8b" + b"garbage" * 10)
    with pytest.raises(UserError, match="corrupt.*--reinstall"):
        obtain_fashion_mnist(tmp_path / "fm", debian_dir=debian, mirror=False, files=pins(fmnist))
    assert not (tmp_path / "fm").exists()


def test_obtain_corrupt_debian_file_falls_back_to_mirror(server, tmp_path, fmnist, capsys):
    debian = debian_dir(tmp_path, fmnist)
    (debian / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(b"bit rot"))
    server.routes["/train-images-idx3-ubyte.gz"] = [("ok", gzip.compress(fmnist["train-images-idx3-ubyte"]))]
    dest = tmp_path / "fashion-mnist"
    obtain_fashion_mnist(dest, debian_dir=debian, mirror=True, files=pins(fmnist), mirrors=(server.url("/"),))
    assert_dataset(dest, fmnist)
    assert "warning:" in capsys.readouterr().err
    assert sum(server.hits.values()) == 1


def test_obtain_corrupt_debian_file_and_bad_mirror(server, tmp_path, fmnist, fast_mirrors):
    debian = debian_dir(tmp_path, fmnist)
    (debian / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(b"bit rot"))
    server.routes["/train-images-idx3-ubyte.gz"] = [("ok", gzip.compress(b"also wrong"))]
    dest = tmp_path / "fashion-mnist"
    with pytest.raises(UserError, match="--reinstall dataset-fashion-mnist.*mirrors failed too") as error:
        obtain_fashion_mnist(dest, debian_dir=debian, mirror=True, files=pins(fmnist), mirrors=(server.url("/"),))
    assert sha(b"also wrong") in str(error.value)
    assert not dest.exists()


REAL_DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")


@pytest.mark.skipif(
    not REAL_DEBIAN_DIR.is_dir(), reason=f"{REAL_DEBIAN_DIR} missing: apt-get install dataset-fashion-mnist"
)
def test_obtain_real_debian_fashion_mnist(tmp_path):
    dest = obtain_fashion_mnist(tmp_path / "fashion-mnist", debian_dir=REAL_DEBIAN_DIR, mirror=False)
    assert tree(dest) == set(fashion_mnist.FASHION_MNIST_FILES)
    for split, n in (("train", 60000), ("t10k", 10000)):
        images = fashion_mnist.read_idx(dest / f"{split}-images-idx3-ubyte")
        labels = fashion_mnist.read_idx(dest / f"{split}-labels-idx1-ubyte")
        assert images.shape == (n, 28, 28) and images.dtype == np.uint8
        assert labels.shape == (n,) and labels.dtype == np.uint8
        assert set(np.unique(labels)) == set(range(10))


def test_mirrors_match_torchvision():
    torchvision = pytest.importorskip("torchvision")
    assert tuple(torchvision.datasets.FashionMNIST.mirrors) == fashion_mnist.FASHION_MNIST_MIRRORS


def test_obtain_fashion_mnist_with_unreachable_mirror_raises_both_fixes(tmp_path, monkeypatch):
    monkeypatch.setattr(fashion_mnist, "_MIRROR_RETRIES", 1)
    with socket_closed_port() as port, pytest.raises(UserError) as caught:
        fashion_mnist.obtain_fashion_mnist(
            tmp_path / "raw" / "fashion-mnist", debian_dir=tmp_path, mirror=True, mirrors=(f"http://127.0.0.1:{port}/",)
        )
    assert "apt-get install dataset-fashion-mnist" in str(caught.value) and "mirrors" in str(caught.value)
    assert not list((tmp_path / "raw").iterdir())
