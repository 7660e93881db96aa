"""pipeline.data.fetch: verified downloads against a loopback server, and safe unzipping."""

from __future__ import annotations

import io
import os
import stat
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
from helpers import PAYLOAD, sha, tree

from pipeline.core import files
from pipeline.core.errors import UserError
from pipeline.data import fetch

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
    assert files.file_sha256(path) == sha(data)


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


# --- bounded in size and time ------------------------------------------------------------------------


def test_a_download_announcing_more_than_the_cap_is_refused_before_its_body(server, tmp_path, sleeps):
    server.routes["/big.bin"] = [("ok", PAYLOAD)]  # 19,000 bytes
    url = server.url("/big.bin")
    with pytest.raises(fetch.TooLarge) as caught:
        fetch.download(url, tmp_path / "big.bin", sha(PAYLOAD), max_bytes=10_000, progress=False)
    assert str(caught.value) == (
        f"{url} announces 19,000 bytes (0.0 MiB), over the download cap of 10,000 bytes (0.0 MiB); nothing was "
        "saved. Check the URL, or if you trust the file, raise paper.max_download_mb in params.yaml"
    )
    assert server.hits["/big.bin"] == 1 and sleeps == []  # not retried
    assert tree(tmp_path) == set()


def test_a_server_streaming_zeros_without_a_length_is_stopped_at_the_cap(server, tmp_path, sleeps):
    server.routes["/zeros"] = [("flood", 256 << 20)]  # would send 256 MiB
    cap = 4 << 20
    with pytest.raises(fetch.TooLarge, match="sends more than that, over the download cap of 4,194,304 bytes"):
        fetch.download(server.url("/zeros"), tmp_path / "zeros", "0" * 64, max_bytes=cap, progress=False)
    assert tree(tmp_path) == set()  # the partial file is gone
    assert sleeps == []


def test_a_server_sending_a_byte_at_a_time_ends_at_the_total_deadline(server, tmp_path, sleeps):
    """Each read gets a byte well within the per-read timeout, so only a total deadline ends it."""
    server.routes["/drip"] = [("drip", 0.2)]
    url = server.url("/drip")
    started = time.monotonic()
    with pytest.raises(fetch.TooSlow) as caught:
        fetch.download(url, tmp_path / "drip", "0" * 64, timeout_s=30.0, deadline_s=1.5, progress=False)
    took = time.monotonic() - started
    assert 1.5 <= took < 3.0, took
    message = str(caught.value)
    assert message.startswith(f"{url} did not finish downloading within the deadline of 1.5 s (")
    assert " bytes received, " in message and message.endswith(
        "); nothing was saved. The server is stalled or too slow: rerun later, or "
        "raise paper.download_deadline_s in params.yaml for a slow connection"
    )
    assert server.hits["/drip"] == 1 and tree(tmp_path) == set()


def test_the_deadline_bounds_retries_and_their_waits_too(server, tmp_path):
    server.routes["/f.bin"] = [("hang", 5.0)]
    started = time.monotonic()
    with pytest.raises(fetch.TooSlow, match=r"deadline of 1 s \(0 bytes received, last error: TimeoutError"):
        fetch.download(server.url("/f.bin"), tmp_path / "f.bin", sha(PAYLOAD), retries=5, backoff_s=0.3,
                       timeout_s=0.4, deadline_s=1.0, progress=False)  # fmt: skip
    assert time.monotonic() - started < 2.0
    assert tree(tmp_path) == set()


class _Called(Exception):
    """Raised by a stand-in download once it has recorded its arguments."""


def test_the_download_cap_and_deadline_are_params_the_stages_pass(tmp_path, monkeypatch):
    from helpers import params_with

    from pipeline.data.presets import image_folder
    from pipeline.pretrain import supervised as pretraining

    params = params_with(paper={"max_download_mb": 3, "download_deadline_s": 7})
    seen = []

    def recorded(*args, **kwargs):
        seen.append(kwargs)
        raise _Called

    monkeypatch.setattr(image_folder, "download", recorded)
    monkeypatch.setattr(pretraining, "download", recorded)
    with pytest.raises(_Called):
        image_folder.obtain_image_folder(params.paper, tmp_path / "images", tmp_path / "downloads")
    with pytest.raises(_Called):
        pretraining.torchvision_weights(params.paper)
    assert seen == [{"max_bytes": 3 << 20, "deadline_s": 7.0}] * 2


@pytest.mark.parametrize("url", ["ftp://example.invalid/a.zip", "gopher://x/a.zip", "/etc/passwd", "data/a.zip"])
def test_download_refuses_other_schemes_before_any_io(tmp_path, url):
    with pytest.raises(UserError, match=r"only https, http, file are allowed|not a file"):
        fetch.download(url, tmp_path / "a.zip", "0" * 64)
    assert list(tmp_path.iterdir()) == []
