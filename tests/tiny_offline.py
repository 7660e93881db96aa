"""The committed pipeline on a tiny offline fixture, for tests and benchmarks that run the whole of it through
real ``dvc repro``: small random IDX files (no Debian package, no network), one seed, one or two points per
matrix, the tiny sizes of tests/stages/test_e2e_offline.py. A git + DVC project in a folder of its own."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import numpy as np
from helpers import idx_bytes
from project_copy import clean_env, copy_project, set_params

OUTPUT_FOLDERS = ("metrics", "plots", "models", "data/prepared")
# Outputs that hold wall-clock time or the machine's name: listed, never hashed.
UNHASHED = ("wall_s", "seconds")


def write_fixture(repo: Path, runtime: dict | None = None) -> None:
    """The tiny params and random IDX files in ``repo``; ``runtime`` merges into its runtime section (CPU, fp32)."""
    set_params(
        repo,
        seeds=[0],
        runtime={"device": "cpu", "precision": "fp32", "threads": 2, **(runtime or {})},
        offline={"classes": ["Trouser", "Sandal", "Bag"], "train_per_class": 4, "mirror": False},
        validation={"offline_per_class": 2},
        backbone={"epochs": 1, "batch_size": 16},
        pretraining_scale={"points": [0, 1], "pool_per_class": [2, 8], "shots": [1, 2]},
        masked_patch={"epochs": 1, "batch_size": 16, "decision_shots": 1, "stretch_epochs": 2, "stretch_shots": 2},
        synthetic={"primary_shots": 2},
        train_scratch={"offline": {"epochs": 1, "batch_size": 8}},
        linear_probe={"offline": {"epochs": 1, "batch_size": 8}},
        data_hunger={"points": [0, 1], "offline_sizes": [1, 2], "paper_fractions": [0.5, 1.0], "headline_point": 1,
                     "max_epochs": 1, "min_steps": 2, "scores": 2, "patience": 1, "plateau_window": 1, "batch_size": 4,
                     "cnn_widths": [4, 8, 8, 8],
                     "scratch": {"lrs": [0.001]}, "cnn": {"lrs": [0.001]}, "finetune": {"lrs": [0.0001]}},
    )  # fmt: skip
    rng = np.random.default_rng(0)
    raw = repo / "data/raw/fashion-mnist"  # the download stage's output, recorded by `dvc commit`: random
    raw.mkdir(parents=True)  # images cannot match the pinned hashes it checks
    for prefix, per_class in (("train", 8), ("t10k", 3)):
        labels = np.repeat(np.arange(10, dtype=np.uint8), per_class)
        images = rng.integers(0, 256, size=(len(labels), 28, 28), dtype=np.uint8)
        (raw / f"{prefix}-images-idx3-ubyte").write_bytes(idx_bytes(images))
        (raw / f"{prefix}-labels-idx1-ubyte").write_bytes(idx_bytes(labels))


def listing(repo: Path, folders: tuple[str, ...] = OUTPUT_FOLDERS) -> list[str]:
    """``<md5>  <path>`` for every file under ``folders`` (``-`` for the files that hold a time)."""
    rows = []
    for folder in folders:
        for path in sorted((repo / folder).rglob("*")):
            if path.is_file():
                name = path.relative_to(repo).as_posix()
                digest = "-" if any(word in name for word in UNHASHED) else hashlib.md5(path.read_bytes()).hexdigest()
                rows.append(f"{digest}  {name}")
    return rows


def tiny_project(repo: Path, runtime: dict | None = None) -> dict[str, str]:
    """Copies the project into the empty folder ``repo``, writes the fixture and makes it a git + DVC project
    whose download stage is recorded (its random files cannot match the pinned hashes); returns the environment
    to run its commands in: MLflow's store and the probe cache inside ``repo``."""
    copy_project(repo)
    write_fixture(repo, runtime)
    env = clean_env()
    env["MLFLOW_TRACKING_URI"] = f"sqlite:///{repo / 'mlflow.db'}"
    env["PIPELINE_CACHE_DIR"] = str(repo / ".cache")
    for command in (["git", "init", "-q"], ["dvc", "init", "-q"], ["dvc", "config", "core.analytics", "false"],
                    ["dvc", "commit", "-f", "download"]):  # fmt: skip
        run_checked(command, repo, env)
    return env


def run_checked(command: list[str], repo: Path, env: dict[str, str], timeout: float | None = None) -> str:
    """Runs ``command`` in ``repo``; its output.

    Raises:
        RuntimeError: it failed; the message holds the end of its output.
    """
    result = subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True, timeout=timeout)
    if result.returncode:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result.stdout + result.stderr
