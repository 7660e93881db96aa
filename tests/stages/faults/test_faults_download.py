"""Faults of the download stage (pipeline/data/fetch.py, the archive and folder checks,
pipeline/data/presets/fashion_mnist.py):
network unreachable, DNS failure, HTTP 404 and 500 (issue 5's case 1), a download killed midway (2), a checksum
mismatch (3), zip-slip and symlink members (4), the size cap (5), bad folder layouts (6) and the offline
preset's data unavailable (14)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from fault_project import Project, assert_fails, copy_of, good_folder, image_tree, in_parallel, zip_bytes
from helpers import sha
from loopback import socket_closed_port
from project_copy import set_params

from pipeline.core import files


def test_unresolvable_host_fails_after_retries_naming_the_url_and_the_fix(project, unchanged):
    url = "http://nonexistent.invalid/x.zip"
    with project.params(paper={"url": url}):
        started = time.monotonic()
        result = project.stage("download", fault="dns")
    line = assert_fails(result, "download", f"could not reach {url} after 3 attempts", "internet connection")
    assert "Name or service not known" in line
    assert time.monotonic() - started >= 3  # backoff of 1 s, then 2 s, between the three attempts


def test_connection_refused_fails_naming_the_url(project, unchanged):
    with socket_closed_port() as port:
        url = f"http://127.0.0.1:{port}/x.zip"
        with project.params(paper={"url": url}):
            result = project.stage("download")
    assert_fails(result, "download", f"could not reach {url}", "rerun to retry")


def test_http_404_fails_at_once_without_retrying(project, unchanged):
    url = project.server.url("/missing/gone.zip")
    with project.params(paper={"url": url}):
        result = project.stage("download")
    assert_fails(result, "download", f"{url} returned HTTP 404", "check the URL in params.yaml")
    assert project.server.hits["/missing/gone.zip"] == 1


def test_http_500_then_success_retries_and_finishes(project, unchanged):
    project.server.routes["/flaky/flaky.zip"] = [("status", 500), ("ok", project.archive)]
    with project.params(paper={"url": project.server.url("/flaky/flaky.zip")}):
        project.ok("download")
    assert project.server.hits["/flaky/flaky.zip"] == 2  # one retry after the 500
    assert files.file_sha256(project.repo / "data/downloads/flaky.zip") == sha(project.archive)


def test_download_killed_midway_then_rerun_restarts_cleanly(project, unchanged):
    route = "/stall/stalled.zip"
    project.server.routes[route] = [("stall", project.archive), ("ok", project.archive)]
    downloads = project.repo / "data/downloads"
    with project.params(paper={"url": project.server.url(route)}):
        process = subprocess.Popen(
            [sys.executable, "-m", "pipeline.stages.download"],
            cwd=project.repo,
            env=project.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 120
        while not list(downloads.glob(".stalled.zip.*.partial")):  # headers in, half the body sent, then a stall
            assert process.poll() is None and time.monotonic() < deadline, "the download never started"
            time.sleep(0.1)
        process.send_signal(signal.SIGKILL)
        process.wait()
        (partial,) = downloads.glob(".stalled.zip.*.partial")  # the killed run's half file, never renamed
        assert not (downloads / "stalled.zip").exists()
        assert not list((project.repo / "data/raw").glob(".*"))  # nothing half-extracted beside the dataset
        project.ok("download")
    assert project.server.hits[route] == 2
    assert not partial.exists()  # the dead run's leftover is cleared
    assert files.file_sha256(downloads / "stalled.zip") == sha(project.archive)
    assert not list(downloads.glob(".*"))


def test_checksum_mismatch_shows_both_hashes_and_how_to_repin_and_keeps_nothing(project, unchanged):
    route = "/changed/other.zip"
    project.server.routes[route] = [("ok", project.archive)]
    with project.params(paper={"url": project.server.url(route), "sha256": "0" * 64}):
        result = project.stage("download")
    assert_fails(
        result, "download", "sha256 mismatch", f"expected {'0' * 64}", f"got {sha(project.archive)}",
        "nothing was saved", "sha256sum", "set the new hash in params.yaml",
    )  # fmt: skip
    assert not (project.repo / "data/downloads/other.zip").exists()
    assert not list((project.repo / "data/downloads").glob(".*"))


def symlink_member(name: str, target: str) -> tuple[zipfile.ZipInfo, bytes]:
    info = zipfile.ZipInfo(name)
    info.external_attr = (0o120777 << 16) | 0  # S_IFLNK: a symlink whose target is the member's data
    return info, target.encode()


@pytest.mark.parametrize(
    "member, why",
    [
        (("../escaped.txt", b"owned"), "'..' component"),
        (("/tmp/escaped-absolute.txt", b"owned"), "absolute path"),
        (symlink_member("train/alpha/link.png", "/etc/passwd"), "is a symlink"),
    ],
    ids=["dotdot", "absolute", "symlink"],
)
def test_unsafe_archive_is_rejected_and_nothing_is_written_anywhere(project, unchanged, member, why):
    archive = zip_bytes([*sorted(image_tree({"train": 1, "test": 1}).items()), member])
    route = f"/unsafe/{why.split()[-1].strip(chr(39))}.zip"
    project.server.routes[route] = [("ok", archive)]
    outside = project.repo.parent
    before = {p for p in outside.rglob("*") if "mlflow" not in p.name}
    with project.params(paper={"url": project.server.url(route), "sha256": sha(archive)}):
        result = project.stage("download")
    assert_fails(result, "download", "is unsafe and was not extracted", repr(member[0].filename
                 if isinstance(member[0], zipfile.ZipInfo) else member[0]), why)  # fmt: skip
    after = {p for p in outside.rglob("*") if "mlflow" not in p.name}
    assert after - before == {project.repo / "data/downloads" / Path(route).name}  # only the verified archive
    assert not Path("/tmp/escaped-absolute.txt").exists()


def test_archive_over_the_size_cap_is_rejected_before_extraction(project, unchanged):
    bomb = zip_bytes([*sorted(image_tree({"train": 1, "test": 1}).items()), ("train/alpha/big.png", bytes(3 << 20))])
    assert len(bomb) < 100_000  # 3 MiB of zeros compresses to almost nothing
    project.server.routes["/bomb/bomb.zip"] = [("ok", bomb)]
    with project.params(paper={"url": project.server.url("/bomb/bomb.zip"), "sha256": sha(bomb), "max_extract_mb": 1}):
        result = project.stage("download")
    assert_fails(result, "download", "over the cap of 1,048,576 bytes", "nothing was extracted", "paper.max_extract_mb")
    assert (
        not list((project.repo / "data/raw").glob(".*")) and not (project.repo / "data/raw/images.extracted").exists()
    )


LAYOUT_FAULTS = {
    "no-test-split": (lambda f: shutil.rmtree(f / "test"), "test is missing"),
    "no-train-split": (lambda f: shutil.rmtree(f / "train"), "has no train/ and test/ folders"),
    "empty-class": (lambda f: [p.unlink() for p in (f / "train/beta").iterdir()], "beta holds no image"),
    "classes-differ": (lambda f: (f / "test/alpha").rename(f / "test/delta"), "different class folders"),
}


def test_bad_folder_layout_stops_the_download_stage_and_writes_nothing(project, tmp_path):
    copies, processes = [], []
    for case, (damage, _) in LAYOUT_FAULTS.items():
        folder = good_folder(tmp_path / case / "mine")
        damage(folder)
        copies.append(copy_of(project, tmp_path / case / "project", paper={"folder": str(folder)}))
        processes.append(copies[-1].start("download"))
    for copy, result, (_, expected) in zip(copies, in_parallel(processes), LAYOUT_FAULTS.values(), strict=True):
        assert_fails(result, "download", expected)
        assert [p.name for p in (copy.repo / "data").iterdir()] == ["paper_folder"]  # its default, copied in


def test_bad_layout_inside_the_zip_is_caught_before_the_dataset_is_replaced(project, unchanged):
    archive = zip_bytes(sorted(image_tree({"train": 1}).items()))  # no test/ split
    project.server.routes["/layout/train-only.zip"] = [("ok", archive)]
    with project.params(paper={"url": project.server.url("/layout/train-only.zip"), "sha256": sha(archive)}):
        result = project.stage("download")
    assert_fails(result, "download", "test is missing", "train/<class>/*.jpg and test/<class>/*.jpg")


def offline_project(bare: Project, tmp_path: Path, mirror: bool) -> Project:
    empty = tmp_path / "no-debian-package"
    empty.mkdir()
    set_params(bare.repo, preset="offline", offline={"debian_dir": str(empty), "mirror": mirror})
    return bare


def test_offline_data_missing_without_mirror_names_both_ways_and_writes_nothing(bare, tmp_path):
    project = offline_project(bare, tmp_path, mirror=False)
    result = project.stage("download")
    assert_fails(
        result, "download", "apt-get install dataset-fashion-mnist", "offline.debian_dir", "internet connection",
        "offline.mirror: true",
    )  # fmt: skip
    assert [p.name for p in (project.repo / "data").iterdir()] == ["paper_folder"]  # its default, copied in


def test_offline_data_missing_and_mirror_unreachable_names_both_ways_and_writes_nothing(bare, tmp_path):
    project = offline_project(bare, tmp_path, mirror=True)
    with socket_closed_port() as port:
        result = project.stage("download", fault=f"mirror:http://127.0.0.1:{port}/")
    assert_fails(
        result, "download", "apt-get install dataset-fashion-mnist", "torchvision's mirrors failed",
        f"could not reach http://127.0.0.1:{port}/", "internet connection",
    )  # fmt: skip
    assert not list((project.repo / "data/raw").iterdir())  # the folder may exist; nothing in it
