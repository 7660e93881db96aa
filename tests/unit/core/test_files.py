"""pipeline.core.files: atomic writes, safe tensor loading, stable JSON."""

from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import OpensMarker, digest_tree, sha

from pipeline.core import files
from pipeline.core.errors import UserError

# --- files -----------------------------------------------------------------------------------


@pytest.mark.parametrize("writer", ["torch.save", "pickle"])
def test_load_tensors_refuses_pickled_code_and_runs_none_of_it(tmp_path, writer):
    marker = tmp_path / "code-ran"
    path = tmp_path / "model.pt"
    payload = {"weights": torch.zeros(2), "trap": OpensMarker(marker)}
    if writer == "torch.save":
        torch.save(payload, path)
    else:
        path.write_bytes(pickle.dumps(payload, protocol=2))  # torch's own legacy protocol
    with pytest.raises(UserError, match=re.escape(str(path))):
        files.load_tensors(path)
    assert not marker.exists()
    # the payload is live: an unsafe load runs it, so the check above can fail
    if writer == "torch.save":
        torch.load(path, weights_only=False)
    else:
        pickle.loads(path.read_bytes())
    assert marker.exists()


def test_load_tensors_rejects_truncated_and_garbage_files_naming_the_path(tmp_path):
    good = tmp_path / "good.pt"
    files.save_tensors(good, {"x": torch.arange(1000)})
    assert torch.equal(files.load_tensors(good)["x"], torch.arange(1000))
    truncated, garbage = tmp_path / "truncated.pt", tmp_path / "garbage.pt"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    garbage.write_bytes(os.urandom(512))
    for path in (truncated, garbage):
        with pytest.raises(UserError, match=re.escape(str(path))):
            files.load_tensors(path)


def test_load_tensors_of_a_missing_file_says_run_dvc_repro(tmp_path):
    with pytest.raises(UserError, match=r"dvc repro"):
        files.load_tensors(tmp_path / "absent.pt")


@pytest.mark.parametrize("fails", ["write", "os.replace"])
@pytest.mark.parametrize(
    "save", [lambda p: files.write_json(p, {"new": 1}), lambda p: files.save_tensors(p, {"new": torch.ones(3)})]
)
def test_failed_write_keeps_the_previous_file_and_leaves_no_temp_file(tmp_path, monkeypatch, fails, save):
    path = tmp_path / "out" / "result.json"
    files.write_json(path, {"old": 0})
    before = path.read_bytes()

    def half_then_fail(self, data):
        with open(self, "wb") as stream:
            stream.write(data[: len(data) // 2])
        raise OSError("disk full")

    def half_a_tensor_file_then_fail(obj, stream):  # save_tensors streams torch.save into the file
        stream.write(b"PK\x03\x04 half")
        raise OSError("disk full")

    def refuse(src, dst):
        raise OSError("rename refused")

    if fails == "write":
        monkeypatch.setattr(Path, "write_bytes", half_then_fail)
        monkeypatch.setattr(files.torch, "save", half_a_tensor_file_then_fail)
    else:
        monkeypatch.setattr(files.os, "replace", refuse)
    with pytest.raises(OSError):
        save(path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["result.json"]


def test_write_json_is_sorted_and_byte_stable(tmp_path):
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    files.write_json(first, {"zeta": 1, "alpha": {"y": 2, "x": [1, 2]}})
    files.write_json(second, {"alpha": {"x": [1, 2], "y": 2}, "zeta": 1})
    assert first.read_bytes() == second.read_bytes()
    lines = ["{", '  "alpha": {', '    "x": [', "      1,", "      2", "    ],", '    "y": 2', "  },"]
    lines += ['  "zeta": 1', "}"]
    assert first.read_text() == "\n".join(lines) + "\n"


def test_stale_temp_files_of_dead_writers_are_removed_and_live_ones_kept(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", ""])
    dead.wait()
    stale = tmp_path / f".seed_0.pt.{dead.pid}.abc123.tmp"
    stale_dir = tmp_path / f".images.{dead.pid}.xyz.partial"
    live = tmp_path / f"{files.temp_prefix(tmp_path / 'seed_1.pt')}def456.tmp"
    unrelated = [tmp_path / ".gitignore", tmp_path / "seed_0.pt", tmp_path / ".seed_0.pt.abcd.tmp"]
    for path in (stale, live, *unrelated):
        path.write_bytes(b"x")
    stale_dir.mkdir()
    (stale_dir / "half.png").write_bytes(b"x")
    assert sorted(files.remove_stale_temps(tmp_path)) == sorted([stale, stale_dir])
    assert live.exists() and all(p.exists() for p in unrelated)
    files.write_bytes(tmp_path / "seed_0.pt", b"new")  # atomic writes sweep their folder too
    assert live.exists() and (tmp_path / "seed_0.pt").read_bytes() == b"new"


def test_atomic_dir_replaces_a_folder_whole_or_not_at_all(tmp_path):
    models = tmp_path / "models" / "scratch"
    files.write_bytes(models / "seed_0.pt", b"old 0")
    files.write_bytes(models / "seed_1.pt", b"old 1")  # a seed a later run no longer has
    with pytest.raises(OSError), files.atomic_dir(models) as folder:
        files.write_bytes(folder / "seed_0.pt", b"new 0")
        raise OSError("killed between seeds")
    assert digest_tree(models) == {"seed_0.pt": sha(b"old 0"), "seed_1.pt": sha(b"old 1")}
    with files.atomic_dir(models) as folder:
        files.write_bytes(folder / "seed_0.pt", b"new 0")
    assert digest_tree(models) == {"seed_0.pt": sha(b"new 0")}
    assert sorted(p.name for p in models.parent.iterdir()) == ["scratch"]  # no temporary folder left


MERGED = '{\n<<<<<<< HEAD\n  "test_acc": 0.61\n=======\n  "test_acc": 0.64\n>>>>>>> other-branch\n}\n'


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (MERGED, r"has merge-conflict markers \(<<<<<<< \.\.\. >>>>>>>\)"),
        ('{"test_acc": {"mean": 0.6', r"is not valid JSON \(.* at line 1 column \d+: truncated or damaged\)"),
        (b"\x80\x00\xff binary", r"is not a text file"),
    ],
    ids=["merge-conflict", "truncated", "binary"],
)
def test_a_merged_truncated_or_binary_input_is_one_line_naming_the_file_and_both_fixes(tmp_path, content, problem):
    path = tmp_path / "metrics" / "data_hunger.json"
    path.parent.mkdir()
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(UserError, match=re.escape(str(path)) + " " + problem) as caught:
        files.read_json(path)
    message = str(caught.value)
    assert "\n" not in message and f"git checkout --ours {path}" in message and "dvc repro -f -s <stage>" in message


def test_marker_like_text_inside_a_value_is_no_merge(tmp_path):
    path = tmp_path / "note.json"
    path.write_text('{"note": "<<<<<<< quoted, not at a line start",\n "end": ">>>>>>> neither"}')
    assert files.read_json(path)["note"].startswith("<<<<<<<")


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("epoch,train_loss\n1,0.9\n2,0.", None),  # cut mid-number: still two columns, read as written
        ("epoch,train_loss\n1,0.9\n2", r"is truncated or damaged \(line 3 has 1 of its 2 columns\)"),
        ("", r"has no header row"),
    ],
    ids=["cut-mid-value", "cut-mid-row", "empty"],
)
def test_a_truncated_csv_input_is_one_line_naming_the_file_and_the_row(tmp_path, content, problem):
    path = tmp_path / "plots" / "history" / "scratch_seeds.csv"
    path.parent.mkdir(parents=True)
    path.write_text(content)
    if problem is None:
        assert files.read_csv_text(path) == content
        return
    with pytest.raises(UserError, match=re.escape(str(path)) + " " + problem):
        files.read_csv_text(path)
