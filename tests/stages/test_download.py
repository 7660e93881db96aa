"""The download stage's copy of a local dataset folder: a full disk or an unreadable file mid-copy ends in one
line and leaves the previous data/raw as it was."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest
from helpers import params_with, tree
from PIL import Image

from pipeline.core.errors import UserError
from pipeline.data.presets import image_folder


def make_image_folder(root):
    for split in ("train", "test"):
        for name in ("a", "b"):
            (root / split / name).mkdir(parents=True)
            for i in range(3):
                Image.new("RGB", (8, 8), (i, 0, 0)).save(root / split / name / f"{i}.png")
    return root


@pytest.fixture
def copying(tmp_path):
    params = params_with(paper={"folder": str(make_image_folder(tmp_path / "mine"))})
    target = tmp_path / "raw" / "images"
    target.mkdir(parents=True)
    (target / "previous.txt").write_text("the last good copy")
    return params, target


def failing_after(count: int, error: OSError):
    copied, real = [], shutil.copy2

    def copy2(source, target):
        if len(copied) == count:
            raise error
        copied.append(source)
        return real(source, target)

    return copy2


def test_a_full_disk_while_copying_the_folder_is_one_line_and_keeps_the_previous_copy(copying, monkeypatch):
    params, target = copying
    monkeypatch.setattr(
        image_folder.shutil, "copy2", failing_after(4, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    )
    with pytest.raises(UserError) as caught:
        image_folder.obtain_image_folder(params.paper, target, target.parent / "downloads")
    source = next(iter(sorted((target.parent.parent / "mine").rglob("*.png"))))
    message = str(caught.value)
    assert message.startswith("the disk is full (No space left on device) while copying ")
    assert message.endswith(
        "; nothing was kept (the copy is made in a temporary folder, now removed, and the previous data/raw is "
        "intact): free disk space and rerun"
    )
    assert str(source.parent.parent.parent) in message
    assert tree(target.parent) == {"images", "images/previous.txt"}  # no half-copied folder beside it


def test_an_unreadable_file_while_copying_names_it_in_one_line(copying, monkeypatch):
    params, target = copying
    monkeypatch.setattr(
        image_folder.shutil, "copy2", failing_after(2, PermissionError(errno.EACCES, "Permission denied"))
    )
    with pytest.raises(UserError, match=r"file\(s\) of .* could not be copied \(first: .*Permission denied\)"):
        image_folder.obtain_image_folder(params.paper, target, target.parent / "downloads")
    assert tree(target.parent) == {"images", "images/previous.txt"}


def test_a_changed_image_in_paper_folder_makes_dvc_rerun_download(tmp_path):
    """paper.folder is a DVC dependency of download: after a real `dvc repro download` from a folder of images,
    `dvc status` is clean until one image is replaced, then names the folder."""
    import subprocess
    import sys

    from project_copy import clean_env, copy_project, set_params

    repo = tmp_path / "project"
    repo.mkdir()
    copy_project(repo)
    folder = make_image_folder(tmp_path / "mine")
    set_params(repo, preset="paper", paper={"folder": str(folder)})
    env = clean_env()
    env["MLFLOW_TRACKING_URI"] = f"sqlite:///{tmp_path / 'mlflow.db'}"
    dvc = [str(Path(sys.executable).parent / "dvc")]

    def run(*args: str) -> str:
        result = subprocess.run(dvc + list(args), cwd=repo, env=env, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    for command in (["git", "init", "-q"], dvc + ["init", "-q"]):
        subprocess.run(command, cwd=repo, env=env, check=True, capture_output=True)
    run("repro", "--single-item", "download")
    assert sorted(p.name for p in (repo / "data/raw/images/train/a").iterdir()) == ["0.png", "1.png", "2.png"]
    assert "download" not in run("status", "download")
    Image.new("RGB", (8, 8), (9, 9, 9)).save(folder / "train" / "a" / "1.png")
    status = run("status", "download")
    assert "download:" in status and str(folder) in status


def test_the_default_paper_folder_holds_no_images_so_the_zip_is_used(tmp_path, monkeypatch):
    """The committed default folder has only its README and .gitignore: download takes the pinned zip."""
    from helpers import ROOT

    assert sorted(p.name for p in (ROOT / "data/paper_folder").iterdir()) == [".gitignore", "README.md"]
    params = params_with()
    assert params.paper.folder == "data/paper_folder"
    monkeypatch.chdir(ROOT)

    class Fetched(Exception):
        pass

    def fetch(url, *args, **kwargs):
        raise Fetched(url)

    monkeypatch.setattr(image_folder, "download", fetch)
    with pytest.raises(Fetched, match=params.paper.url):
        image_folder.obtain_image_folder(params.paper, tmp_path / "images", tmp_path / "downloads")
