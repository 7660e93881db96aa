"""Temporary copies of the project for tests that run real stages, `dvc repro` or `dvc exp run`."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def clean_env() -> dict[str, str]:
    """This environment without DVC, MLflow or debug settings, with this interpreter's bin first on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DVC_", "MLFLOW_", "PIPELINE_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONUNBUFFERED"] = "1"  # stage output arrives line by line, so a test can kill it at a known point
    env.update(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
    return env


# The committed run chooses each learning rate on 3 seeds and pairs the curve with 3 masked-patch backbones (issue
# 37); the copies train one or two seeds and one backbone unless a test sets more.
ONE_SEED_CHOICE = {"data_hunger": {"choice_seeds": 1}, "masked_patch": {"extra_seeds": []}}


def copy_project(target: Path) -> None:
    """The package, dvc.yaml, params.yaml (with :data:`ONE_SEED_CHOICE`), .gitignore and the default paper.folder,
    copied into ``target``."""
    shutil.copytree(REPO / "pipeline", target / "pipeline", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("dvc.yaml", "params.yaml", ".gitignore"):
        shutil.copy(REPO / name, target / name)
    set_params(target, **ONE_SEED_CHOICE)
    shutil.copytree(REPO / "data/paper_folder", target / "data/paper_folder")  # paper.folder's default: a dep


def merged(base: dict, changes: dict) -> dict:
    """``base`` with ``changes`` merged in, nested mappings key by key."""
    out = dict(base)
    for key, value in changes.items():
        out[key] = merged(out.get(key) or {}, value) if isinstance(value, dict) else value
    return out


def set_params(repo: Path, **sections) -> None:
    """Updates params.yaml's sections (a dict merges into a section, key by key; anything else replaces it)."""
    params = yaml.safe_load((repo / "params.yaml").read_text())
    (repo / "params.yaml").write_text(yaml.safe_dump(merged(params, sections), sort_keys=False))
