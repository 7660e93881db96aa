"""Where a run's results come from: the git commit and whether the sources differ from it, the versions and
machine, and MLflow's reserved source and user tags; read once per process."""

from __future__ import annotations

import functools
import os
import platform
import subprocess
import sys
from pathlib import Path

import torch

# What decides a run's results. Outputs are left out: `dvc repro` deletes a stage's git-tracked outputs
# before running it, so including them would call every run dirty.
SOURCES = ("pipeline", "params.yaml", "dvc.yaml")


def git_state() -> dict[str, str]:
    """The commit and whether the sources or params differ from it (``unknown`` outside git); read once per
    process and folder, which a stage's nested runs share."""
    return dict(_git_state(os.getcwd()))


@functools.cache
def _git_state(folder: str) -> dict[str, str]:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=folder, capture_output=True, text=True, check=True, timeout=30
        ).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no", "--", *SOURCES))
    except (OSError, subprocess.SubprocessError):
        return {"git_commit": "unknown", "git_dirty": "unknown"}
    return {"git_commit": commit, "git_dirty": str(dirty).lower()}


def context_tags(commit: str) -> dict[str, str]:
    """MLflow's reserved tags (the Source, Version and User columns of `mlflow ui`), and host and pid, by
    which a later stage tells that this run's process died."""
    import getpass

    script = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python"
    source = next((arg for arg in sys.orig_argv[1:] if arg.startswith("pipeline.")), script)  # the -m module
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # pragma: no cover - a uid without a name
        user = "unknown"
    return {
        "mlflow.source.name": source,
        "mlflow.source.type": "LOCAL",
        "mlflow.source.git.commit": commit,
        "mlflow.user": user,
        "host": platform.node(),
        "pid": str(os.getpid()),
    }


def provenance() -> dict[str, str]:
    """Versions and machine, logged with every run."""
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
        "cpu_count": str(os.cpu_count()),
    }
