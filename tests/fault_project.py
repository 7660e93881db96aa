"""The fault suite's project: a copy of the project at the paper preset with the ``tiny`` model, its stages
run as processes against a loopback HTTP server, and the checks every fault test makes (tests/stages/faults/).

Most cases run the real stage (``python -m pipeline.<stage>``) in that copy; a few faults that need help to
happen (a DNS failure, a full disk, an unreachable mirror) are injected by ``inject.py`` (``INJECT``), which
patches one function and then runs the stage unchanged. Nothing leaves the machine: even the ``.invalid`` host
is failed inside the process, so no DNS query is sent. The fault cases are numbered as in issue 5.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from loopback import ScriptedServer
from project_copy import copy_project, set_params

CLASSES = ("alpha", "beta", "gamma")

# Patches one function, then runs the stage exactly as `python -m pipeline.<stage>` would.
INJECT = """
import errno, os, pathlib, runpy, socket, sys

sys.path.insert(0, os.getcwd())  # the project copy's pipeline/, as under `python -m`
fault, stage = sys.argv[1], sys.argv[2]
if fault == "dns":
    real_getaddrinfo = socket.getaddrinfo

    def getaddrinfo(host, *args, **kwargs):
        if str(host).endswith(".invalid"):
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real_getaddrinfo(host, *args, **kwargs)

    socket.getaddrinfo = getaddrinfo
elif fault.startswith("disk-full:"):
    name, real_write = fault.split(":", 1)[1], pathlib.Path.write_bytes

    def write_bytes(self, data):
        if self.name.startswith(f".{name}."):  # the temporary file beside the output
            with open(self, "wb") as stream:
                stream.write(data[: len(data) // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        return real_write(self, data)

    pathlib.Path.write_bytes = write_bytes
elif fault.startswith("mirror:"):
    from pipeline.data.presets import fashion_mnist

    fashion_mnist.obtain_fashion_mnist.__kwdefaults__["mirrors"] = (fault.split(":", 1)[1],)
    fashion_mnist._MIRROR_RETRIES = 1
sys.argv = [stage]
runpy.run_module(f"pipeline.stages.{stage}", run_name="__main__", alter_sys=True)
"""


def png_bytes(rng: np.random.Generator, label: int) -> bytes:
    from PIL import Image

    pixels = rng.integers(0, 80, size=(40, 36, 3), dtype=np.uint8)
    pixels[..., label] += 150  # each class its own colour, so a model can learn something
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def image_tree(per_split: dict[str, int]) -> dict[str, bytes]:
    """``{"train/alpha/0.png": bytes, ...}``: a tiny ImageFolder dataset."""
    rng = np.random.default_rng(0)
    return {
        f"{split}/{name}/{i}.png": png_bytes(rng, label)
        for split, count in per_split.items()
        for label, name in enumerate(CLASSES)
        for i in range(count)
    }


def zip_bytes(members: list[tuple[str | zipfile.ZipInfo, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members:
            archive.writestr(name, data)
    return buffer.getvalue()


@dataclass
class Project:
    """A copy of the project, its environment, and the loopback server its params point at."""

    repo: Path
    env: dict[str, str]
    server: ScriptedServer
    inject: Path

    def start(self, name: str, fault: str | None = None, env: dict[str, str] | None = None) -> subprocess.Popen:
        """Starts ``python -m pipeline.<name>`` (through inject.py when ``fault`` is given)."""
        args = [sys.executable, "-m", f"pipeline.stages.{name}"]
        if fault is not None:
            args = [sys.executable, str(self.inject), fault, name]
        return subprocess.Popen(
            args, cwd=self.repo, env={**self.env, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip

    def stage(self, name: str, fault: str | None = None, env: dict[str, str] | None = None):
        return finish(self.start(name, fault, env))

    def ok(self, name: str, **kwargs) -> subprocess.CompletedProcess:
        result = self.stage(name, **kwargs)
        assert result.returncode == 0, f"stage {name} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        return result

    def params(self, **sections):
        """A context manager: params.yaml changed for the block, then restored."""
        return _changed_params(self.repo, sections)


def finish(process: subprocess.Popen, timeout: float = 300) -> subprocess.CompletedProcess:
    stdout, stderr = process.communicate(timeout=timeout)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def in_parallel(processes: list[subprocess.Popen]) -> list[subprocess.CompletedProcess]:
    """Waits for stages started together: most of a failing stage's time is importing torch, which overlaps."""
    return [finish(process) for process in processes]


def copy_of(project: Project, target: Path, **sections) -> Project:
    """Another copy of ``project``'s code and params (not its data), with ``sections`` changed."""
    copy_project(target)
    shutil.copy(project.repo / "params.yaml", target / "params.yaml")
    set_params(target, **sections)
    return Project(target, project.env, project.server, project.inject)


class _changed_params:
    def __init__(self, repo: Path, sections: dict) -> None:
        self.path, self.sections = repo / "params.yaml", sections

    def __enter__(self) -> None:
        self.saved = self.path.read_bytes()
        set_params(self.path.parent, **self.sections)

    def __exit__(self, *exc) -> None:
        self.path.write_bytes(self.saved)


def assert_fails(result: subprocess.CompletedProcess, stage: str, *fragments: str, one_line: bool = True) -> str:
    """Exit 1, no traceback, and exactly one ``error in stage <stage>: ...`` line holding every fragment."""
    assert result.returncode == 1, f"exit {result.returncode}:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith("error in stage")]
    assert len(lines) == 1, result.stderr[-3000:]
    line = lines[0]
    if not one_line:  # the message runs on to the end of stderr
        line = result.stderr[result.stderr.index(line) :]
    assert line.startswith(f"error in stage {stage}: "), line
    for fragment in fragments:
        assert fragment in line, f"{fragment!r} not in {line!r}"
    return line


def write_tree(root: Path, tree: dict[str, bytes]) -> Path:
    for name, data in tree.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return root


def good_folder(root: Path) -> Path:
    return write_tree(root, image_tree({"train": 2, "test": 1}))
