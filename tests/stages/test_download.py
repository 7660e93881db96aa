"""The download stage's copy of a local dataset folder: a full disk or an unreadable file mid-copy ends in one
line and leaves the previous data/raw as it was."""

from __future__ import annotations

import errno
import os
import shutil

import pytest
from helpers import params_with, tree
from PIL import Image

from pipeline.errors import UserError
from pipeline.stages import download


def image_folder(root):
    for split in ("train", "test"):
        for name in ("a", "b"):
            (root / split / name).mkdir(parents=True)
            for i in range(3):
                Image.new("RGB", (8, 8), (i, 0, 0)).save(root / split / name / f"{i}.png")
    return root


@pytest.fixture
def copying(tmp_path):
    params = params_with(paper={"folder": str(image_folder(tmp_path / "mine"))})
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
    monkeypatch.setattr(download.shutil, "copy2", failing_after(4, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))))
    with pytest.raises(UserError) as caught:
        download.obtain_image_folder(params.paper, target, target.parent / "downloads")
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
    monkeypatch.setattr(download.shutil, "copy2", failing_after(2, PermissionError(errno.EACCES, "Permission denied")))
    with pytest.raises(UserError, match=r"file\(s\) of .* could not be copied \(first: .*Permission denied\)"):
        download.obtain_image_folder(params.paper, target, target.parent / "downloads")
    assert tree(target.parent) == {"images", "images/previous.txt"}
