"""Every output of the committed pipeline on a tiny offline fixture, through real ``dvc repro``, as MD5s.

For refactors that must change no output (a module moved, a function split): run it before and after and
compare the two listings, e.g.

    python benchmarks/tiny_outputs.py > before.txt   # on the old commit
    python benchmarks/tiny_outputs.py > after.txt    # on the new one
    diff before.txt after.txt

The fixture is small IDX files written here (no Debian package, no network), one seed, one or two points per
matrix, the tiny sizes of tests/stages/test_e2e_offline.py. Files whose bytes hold the time or the machine
(repro_time, the runtime's probe cache) are listed by name with ``-`` for their hash.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from helpers import idx_bytes  # noqa: E402
from project_copy import clean_env, copy_project, set_params  # noqa: E402

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
        train_scratch={"offline": {"epochs": 1, "batch_size": 8}},
        linear_probe={"offline": {"epochs": 1, "batch_size": 8}},
        data_hunger={"points": [0, 1], "offline_sizes": [1, 2], "paper_fractions": [0.5, 1.0], "headline_point": 1,
                     "max_epochs": 1, "min_steps": 2, "scores": 2, "patience": 1, "batch_size": 4,
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


def listing(repo: Path) -> list[str]:
    rows = []
    for folder in OUTPUT_FOLDERS:
        for path in sorted((repo / folder).rglob("*")):
            if path.is_file():
                name = path.relative_to(repo).as_posix()
                digest = "-" if any(word in name for word in UNHASHED) else hashlib.md5(path.read_bytes()).hexdigest()
                rows.append(f"{digest}  {name}")
    return rows


def reproduce(repo: Path, runtime: dict | None = None, timeout: float | None = None) -> list[str]:
    """Copies the project into ``repo``, writes the fixture, runs `dvc repro` there; returns :func:`listing`.

    Args:
        repo: an empty folder.
        runtime: merged into the fixture's runtime section (e.g. ``{"device": "cuda", "precision": "bf16"}``).
        timeout: seconds each command may take (``subprocess.TimeoutExpired`` past it).

    Raises:
        RuntimeError: a command failed; the message holds the end of its output.
    """
    copy_project(repo)
    write_fixture(repo, runtime)
    env = clean_env()
    env["MLFLOW_TRACKING_URI"] = f"sqlite:///{repo / 'mlflow.db'}"
    env["PIPELINE_CACHE_DIR"] = str(repo / ".cache")
    for command in (
        ["git", "init", "-q"],
        ["dvc", "init", "-q"],
        ["dvc", "commit", "-f", "download"],
        ["dvc", "repro"],
    ):
        result = subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True, timeout=timeout)
        if result.returncode:
            raise RuntimeError(f"{' '.join(command)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return listing(repo)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="run in this folder and keep it (default: a temporary one)")
    args = parser.parse_args()
    repo = args.keep or Path(tempfile.mkdtemp(prefix="tiny-outputs-"))
    repo.mkdir(parents=True, exist_ok=True)
    try:
        rows = reproduce(repo)
    except RuntimeError as error:
        sys.exit(str(error))
    print("\n".join(rows))
    if not args.keep:
        shutil.rmtree(repo, ignore_errors=True)


if __name__ == "__main__":
    main()
