"""Every user-caused fault, injected where a user meets it: one clear line, exit 1, nothing half-written kept.

Most cases run the real stage (``python -m pipeline.<stage>``) in a copy of the project set to the paper
preset with the ``tiny`` model, against a loopback HTTP server; a few faults that need help to happen (a
DNS failure, a full disk, an unreachable mirror) are injected by ``inject.py``, which patches one function
and then runs the stage unchanged. Nothing leaves the machine: even the ``.invalid`` host is failed inside
the process, so no DNS query is sent.

The numbers in the section comments are the cases of issue 5.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from helpers import OpensMarker, png_claiming, raw_params
from loopback import ScriptedServer, running_server
from project_copy import clean_env, copy_project, merged, set_params

from pipeline import fashion_mnist, fetch, files
from pipeline.arms import ARMS
from pipeline.config import ConfigError, load_params
from pipeline.errors import UserError
from pipeline.model import ViT, ViTConfig, vit_config

REPO = Path(__file__).resolve().parents[2]
CLASSES = ("alpha", "beta", "gamma")
TRAINING_OUTPUTS = ("models/scratch", "plots/history/scratch.csv", "plots/history/scratch_seeds.csv")

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
    from pipeline import fashion_mnist

    fashion_mnist.obtain_fashion_mnist.__kwdefaults__["mirrors"] = (fault.split(":", 1)[1],)
    fashion_mnist._MIRROR_RETRIES = 1
sys.argv = [stage]
runpy.run_module(f"pipeline.stages.{stage}", run_name="__main__", alter_sys=True)
"""


# --- helpers ---------------------------------------------------------------------------------


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


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def digest_tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` (hidden ones too) with its sha256: equal digests mean nothing changed."""
    if root.is_file():
        return {root.name: files.file_sha256(root)}
    return {str(p.relative_to(root)): files.file_sha256(p) for p in sorted(root.rglob("*")) if p.is_file()}


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


# --- fixtures --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server():
    with running_server() as s:
        yield s


@pytest.fixture(scope="module")
def project(tmp_path_factory, server) -> Project:
    """The paper preset on tiny data, every stage but plot run once: the finished outputs faults must not harm."""
    root = tmp_path_factory.mktemp("faults")
    repo = root / "project"
    copy_project(repo)
    archive = zip_bytes(sorted(image_tree({"train": 4, "test": 2}).items()))
    server.routes["/good/images.zip"] = [("ok", archive)]
    torch.manual_seed(0)
    weights = io.BytesIO()
    torch.save(ViT(vit_config("tiny", num_classes=10)).state_dict(), weights)
    server.routes["/good/tiny_vit.pth"] = [("ok", weights.getvalue())]
    set_params(
        repo,
        preset="paper",
        seeds=[0],
        paper={
            "url": server.url("/good/images.zip"),
            "sha256": sha(archive),
            "model": "tiny",
            "backbone_model": "tiny",
            "weights_url": server.url("/good/tiny_vit.pth"),
            "weights_sha256": sha(weights.getvalue()),
        },
        train_scratch={"paper": {"epochs": 2, "batch_size": 4}},
        linear_probe={"paper": {"epochs": 2, "batch_size": 4}},
        validation={"paper_per_class": 1},
    )
    (root / "inject.py").write_text(INJECT)
    # evaluate reads the curve's protocol arms; these faults are about evaluate's own inputs and outputs, so a
    # stand-in curve replaces the 25 sweep items
    point = {"mean": 0.5, "std": 0.0, "per_seed": [0.5]}
    (repo / "metrics").mkdir(exist_ok=True)
    (repo / "metrics/data_hunger.json").write_text(
        json.dumps({arm: {str(n): point for n in (1, 2, 3)} for arm in ARMS})
    )
    env = clean_env()
    env["MLFLOW_TRACKING_URI"] = f"sqlite:///{root / 'mlflow.db'}"
    project = Project(repo, env, server, root / "inject.py")
    project.archive = archive
    chain = (
        "import runpy\nfor stage in {stages}:\n    runpy.run_module(f'pipeline.stages.{{stage}}', run_name='__main__')"
    )
    stages = ["download", "prepare", "backbone", "train_scratch", "linear_probe", "evaluate"]
    result = subprocess.run(  # one process for the whole chain: every start costs seconds of importing torch
        [sys.executable, "-c", chain.format(stages=stages)], cwd=repo, env=env, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    return project


@pytest.fixture
def unchanged(project):
    """Asserts, after the test, that data/raw, data/prepared and the models are exactly as before it."""
    watched = [project.repo / p for p in ("data/raw", "data/prepared", "models", "metrics")]
    before = [digest_tree(p) for p in watched]
    yield
    assert [digest_tree(p) for p in watched] == before


@pytest.fixture
def bare(tmp_path, project) -> Project:
    """A fresh project copy with nothing run yet (same params and server as ``project``)."""
    repo = tmp_path / "bare"
    copy_project(repo)
    shutil.copy(project.repo / "params.yaml", repo / "params.yaml")
    return Project(repo, project.env, project.server, project.inject)


# --- 1. network unreachable, DNS failure, HTTP 404, HTTP 500 then success ----------------------


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


class socket_closed_port:
    """A loopback port with nothing listening."""

    def __enter__(self) -> int:
        import socket

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        return self.sock.getsockname()[1]

    def __exit__(self, *exc) -> None:
        self.sock.close()


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


# --- 2. download killed midway, then rerun -----------------------------------------------------


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


# --- 3. checksum mismatch ----------------------------------------------------------------------


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


# --- 4. zip-slip and symlink members; 5. the size cap ------------------------------------------


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


# --- 6. bad images and bad folder layouts --------------------------------------------------------


def good_folder(root: Path) -> Path:
    return write_tree(root, image_tree({"train": 2, "test": 1}))


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
        assert not (copy.repo / "data").exists()


def test_bad_layout_inside_the_zip_is_caught_before_the_dataset_is_replaced(project, unchanged):
    archive = zip_bytes(sorted(image_tree({"train": 1}).items()))  # no test/ split
    project.server.routes["/layout/train-only.zip"] = [("ok", archive)]
    with project.params(paper={"url": project.server.url("/layout/train-only.zip"), "sha256": sha(archive)}):
        result = project.stage("download")
    assert_fails(result, "download", "test is missing", "train/<class>/*.jpg and test/<class>/*.jpg")


def truncated_jpeg() -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.full((40, 40, 3), 128, dtype=np.uint8)).save(buffer, format="JPEG")
    return buffer.getvalue()[:300]


def test_truncated_jpeg_stops_prepare_naming_the_file(bare, tmp_path):
    folder = good_folder(tmp_path / "mine")
    (folder / "train/alpha/cut.jpg").write_bytes(truncated_jpeg())
    set_params(bare.repo, paper={"folder": str(folder)})
    bare.ok("download")
    line = assert_fails(bare.stage("prepare"), "prepare", "data/raw/images/train/alpha/cut.jpg", "not a readable image")
    assert "remove or replace it" in line
    prepared = bare.repo / "data/prepared"
    assert not (prepared / "manifest.csv").exists() and not (prepared / "info.json").exists()


def test_an_image_over_the_pixel_cap_stops_prepare_from_its_header_naming_file_size_and_cap(bare, tmp_path):
    folder = good_folder(tmp_path / "mine")
    (folder / "train/alpha/bomb.png").write_bytes(png_claiming(15000, 15000))  # 225 megapixels, a few hundred bytes
    set_params(bare.repo, paper={"folder": str(folder)})
    bare.ok("download")
    line = assert_fails(
        bare.stage("prepare"), "prepare", "data/raw/images/train/alpha/bomb.png", "15000x15000 = 225,000,000 pixels",
        "over the cap of 89,478,485", "images.max_pixels",
    )  # fmt: skip
    assert "DecompressionBomb" not in line
    prepared = bare.repo / "data/prepared"
    assert not (prepared / "manifest.csv").exists() and not (prepared / "info.json").exists()


def test_the_pixel_cap_is_a_param(tmp_path):
    from pipeline.data import ImageTooLargeError, decode_image

    path = tmp_path / "small.png"
    path.write_bytes(png_claiming(40, 30))
    with pytest.raises(ImageTooLargeError, match=r"40x30 = 1,200 pixels, over the cap of 1,000"):
        decode_image(path, 32, "resize", 1, max_pixels=1000)


@pytest.mark.parametrize("data", [b"not an image\n", b"", None], ids=["text", "empty", "truncated-jpeg"])
def test_non_image_in_a_class_folder_is_a_user_error_naming_the_file(tmp_path, data):
    from pipeline.data import decode_image

    path = tmp_path / "train" / "beta" / "notes.jpg"
    path.parent.mkdir(parents=True)
    path.write_bytes(truncated_jpeg() if data is None else data)
    with pytest.raises(UserError, match=re.escape(str(path)) + r" is not a readable image"):
        decode_image(path, 32, "resize", 3, max_pixels=10**6)


# --- 7. params.yaml --------------------------------------------------------------------------------


PARAM_FAULTS = {
    "unknown-key": (
        {"train_scratch": {"offline": {"lrr": 0.1}}},
        ["unknown key(s) ['train_scratch.offline.lrr']", "allowed keys are", "'lr'"],
    ),
    "mistyped": (
        {"train_scratch": {"offline": {"batch_size": "eight"}}},
        ["train_scratch.offline.batch_size", "integer", "'eight'"],
    ),
    "negative-lr": (
        {"train_scratch": {"offline": {"lr": -0.1}}},
        ["train_scratch.offline.lr", "must be positive", "-0.1"],
    ),
    "batch-0": ({"linear_probe": {"offline": {"batch_size": 0}}}, ["linear_probe.offline.batch_size", "at least 1"]),
    "unknown-model": ({"paper": {"model": "B/15"}}, ["paper.model", "'B/15'", "'B/16'", "'tiny'"]),
    "unknown-preset": ({"preset": "online"}, ["preset", "offline, paper", "'online'"]),
    "bad-scheme": ({"paper": {"url": "ftp://example.invalid/a.zip"}}, ["paper.url", "https, http or file"]),
}


def test_bad_param_stops_the_stage_naming_the_key_and_the_allowed_values(project, tmp_path):
    copies = [copy_of(project, tmp_path / case, **sections) for case, (sections, _) in PARAM_FAULTS.items()]
    results = in_parallel([copy.start("train_scratch") for copy in copies])
    for result, (_, fragments) in zip(results, PARAM_FAULTS.values(), strict=True):
        assert_fails(result, "train_scratch", "params.yaml", *fragments)


def test_unknown_preset_and_scheme_are_rejected_in_process(tmp_path):
    path = tmp_path / "params.yaml"
    for text, fragments in (
        ("preset: online\n", ["preset", "offline, paper", "'online'"]),
        ("paper:\n  url: ftp://example.invalid/a.zip\n", ["paper.url", "https, http or file", "ftp://"]),
        ("paper:\n  weights_url: javascript:alert(1)\n", ["paper.weights_url", "https, http or file"]),
        ("seeds: []\n", ["seeds", "at least one"]),
        ("paper:\n  max_extract_mb: 0\n", ["paper.max_extract_mb", "positive"]),
    ):
        path.write_text(yaml.safe_dump(merged(raw_params(), yaml.safe_load(text))))
        with pytest.raises(ConfigError) as caught:
            load_params(path)
        for fragment in fragments:
            assert fragment in str(caught.value)
    path.write_text(yaml.safe_dump(merged(raw_params(), {"paper": {"url": "file:///data/a.zip"}})))
    assert load_params(path).paper.url == "file:///data/a.zip"


def test_invalid_yaml_and_missing_params_file_stop_the_stage(project, unchanged):
    saved = (project.repo / "params.yaml").read_bytes()
    try:
        (project.repo / "params.yaml").write_text("train_scratch:\n  lr: [0.1\n")
        # YAML's own message spans several lines (the line, a caret under the column), so one_line=False.
        result = project.stage("train_scratch")
        assert_fails(result, "train_scratch", "params.yaml is not valid YAML", "line 2", one_line=False)
        (project.repo / "params.yaml").unlink()
        assert_fails(project.stage("train_scratch"), "train_scratch", "params.yaml not found", "repository root")
    finally:
        (project.repo / "params.yaml").write_bytes(saved)


def test_image_size_not_divisible_by_patch_size_is_a_clear_value_error():
    with pytest.raises(ValueError, match=r"divisible"):
        vit_config("tiny", patch_size=5)
    with pytest.raises(ValueError, match=r"divisible"):
        ViTConfig(image_size=30, patch_size=8, num_layers=1, num_heads=1, hidden_dim=8, mlp_dim=8)
    with pytest.raises(ValueError, match=r"unknown model name 'B/15'; choose one of \["):
        vit_config("B/15")


# --- 8. non-finite loss --------------------------------------------------------------------------


def test_non_finite_loss_stops_training_with_epoch_step_and_cause(project, unchanged):
    with project.params(train_scratch={"paper": {"lr": 1e30}}):
        result = project.stage("train_scratch")
    line = assert_fails(result, "train_scratch", "the training loss became", "at epoch 1, step", "learning rate")
    assert re.search(r"became (nan|inf)", line) and "Lower the lr" in line


# --- 9. training killed with SIGKILL, then rerun; 13. determinism ------------------------------


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


def test_training_killed_mid_run_then_rerun_matches_an_uninterrupted_run(project):
    repo = project.repo
    before = {p: digest_tree(repo / p) for p in TRAINING_OUTPUTS}
    baseline_state = torch.load(repo / "models/scratch/seed_0.pt", weights_only=True)
    with project.params(train_scratch={"paper": {"epochs": 4}}):  # long enough to be killed after its first epoch
        process = subprocess.Popen(
            [sys.executable, "-m", "pipeline.stages.train_scratch"],
            cwd=repo, env=project.env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        for line in process.stdout:
            if "epoch 1:" in line:
                break
        process.send_signal(signal.SIGKILL)
        process.wait()
        process.stdout.close()
    assert process.returncode == -signal.SIGKILL
    assert {p: digest_tree(repo / p) for p in TRAINING_OUTPUTS} == before  # the killed run replaced nothing
    # What a kill during a checkpoint write leaves: the dead process's temporary file inside the output folder.
    leftover = repo / "models/scratch" / f".seed_0.pt.{process.pid}.k1ll3d.tmp"
    leftover.write_bytes(b"half a checkpoint")
    project.ok("train_scratch")
    assert sorted(p.name for p in (repo / "models/scratch").iterdir()) == ["model.json", "seed_0.pt"]  # no leftover
    for path in ("plots/history/scratch.csv", "plots/history/scratch_seeds.csv"):
        assert digest_tree(repo / path) == before[path]  # per-epoch metrics identical to the uninterrupted run
    state = torch.load(repo / "models/scratch/seed_0.pt", weights_only=True)
    assert state.keys() == baseline_state.keys() and all(torch.equal(state[k], baseline_state[k]) for k in state)


def test_same_seed_gives_byte_identical_metrics_and_another_seed_changes_them(project, tmp_path):
    """Runs after the test above, whose rerun trained the scratch models a second time."""
    repo = project.repo
    metrics = repo / "metrics/evaluate.json"
    first = metrics.read_bytes()
    project.ok("evaluate")
    assert metrics.read_bytes() == first  # a second training run, evaluated again: the same bytes
    other = copy_of(project, tmp_path / "other-seed", seeds=[1])
    shutil.copytree(repo / "data/prepared", other.repo / "data/prepared")
    other.ok("train_scratch")
    seed_0 = (repo / "plots/history/scratch_seeds.csv").read_text().splitlines()
    seed_1 = (other.repo / "plots/history/scratch_seeds.csv").read_text().splitlines()
    assert seed_0[0] == seed_1[0] and len(seed_0) == len(seed_1) == 3
    assert all(a.startswith("0,") and b.startswith("1,") for a, b in zip(seed_0[1:], seed_1[1:], strict=True))
    assert [a.split(",")[1:] for a in seed_0[1:]] != [b.split(",")[1:] for b in seed_1[1:]]


# --- 10. MLflow locked, read-only or unreachable ---------------------------------------------------


def assert_training_outputs_complete(repo: Path) -> None:
    assert torch.load(repo / "models/scratch/seed_0.pt", weights_only=True)["heads.head.weight"].shape[0] == 3
    assert sorted(p.name for p in (repo / "models/scratch").iterdir()) == ["model.json", "seed_0.pt"]
    for path in ("plots/history/scratch.csv", "plots/history/scratch_seeds.csv"):
        assert len((repo / path).read_text().splitlines()) == 1 + 2  # header + one row per epoch


def test_mlflow_failure_warns_and_the_stage_finishes_with_complete_outputs(project, tmp_path):
    (tmp_path / "a-file").write_text("")  # no folder can be made under a file, even by root
    locked = tmp_path / "locked.db"
    shutil.copy(project.env["MLFLOW_TRACKING_URI"].removeprefix("sqlite:///"), locked)  # a store with tables
    stores = {
        "http-closed-port": "http://127.0.0.1:9",
        "sqlite-under-a-file": f"sqlite:///{tmp_path / 'a-file' / 'mlflow.db'}",
        "sqlite-locked": f"sqlite:///{locked}",
    }
    holder = sqlite3.connect(locked, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another writer holds the database for the whole stage
    copies, processes = [], []
    try:
        for case, uri in stores.items():
            copies.append(copy_of(project, tmp_path / case))
            shutil.copytree(project.repo / "data/prepared", copies[-1].repo / "data/prepared")
            env = {
                "MLFLOW_TRACKING_URI": uri,
                "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
                "MLFLOW_HTTP_REQUEST_TIMEOUT": "2",
            }
            processes.append(copies[-1].start("train_scratch", env=env))
        results = in_parallel(processes)
    finally:
        holder.rollback()
        holder.close()
    for case, copy, result in zip(stores, copies, results, strict=True):
        assert result.returncode == 0, f"{case}: {result.stderr[-3000:]}"
        assert "warning: MLflow start failed" in result.stderr, case
        assert "metrics/*.json still record this run" in result.stderr
        assert result.stderr.count("warning: MLflow") == 1, case  # one warning, then no more attempts
        assert_training_outputs_complete(copy.repo)
    assert "database is locked" in results[2].stderr


TRACK_TWICE = """
import sys
from pipeline.tracking import Tracker

for i in range(2):
    with Tracker("vit-parallel", f"writer{sys.argv[1]}-{i}", {"stage": "x"}, {"a": sys.argv[1]}) as tracker:
        for step in range(1, 4):
            tracker.log_metrics({"test_acc": step / 4}, step=step)
"""


def test_parallel_writers_on_a_new_sqlite_store_record_every_run(tmp_path):
    """Two processes creating MLflow's tables at once used to corrupt the schema and lose runs silently."""
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {**clean_env(), "MLFLOW_TRACKING_URI": uri, "DVC_ROOT": str(tmp_path), "PYTHONPATH": str(REPO)}
    writers = [
        subprocess.Popen([sys.executable, "-c", TRACK_TWICE, str(n)], env=env, stderr=subprocess.PIPE, text=True)
        for n in (1, 2)
    ]
    errors = [writer.communicate(timeout=300)[1] for writer in writers]
    assert all("warning: MLflow" not in error for error in errors), errors
    client = mlflow.MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("vit-parallel").experiment_id])
    assert sorted(r.info.run_name for r in runs) == ["writer1-0", "writer1-1", "writer2-0", "writer2-1"]
    assert all(len(client.get_metric_history(r.info.run_id, "test_acc")) == 3 for r in runs)


# --- 11. a checkpoint holding a pickle payload -------------------------------------------------------


@pytest.mark.parametrize("stage", ["linear_probe", "evaluate"])
def test_poisoned_backbone_checkpoint_is_refused_and_its_code_never_runs(project, tmp_path, stage):
    backbone = project.repo / "models/backbone.pt"
    saved = backbone.read_bytes()
    marker = tmp_path / "code-ran"
    state = torch.load(backbone, weights_only=True)
    try:
        torch.save({**state, "trap": OpensMarker(marker)}, backbone)
        result = project.stage(stage)
    finally:
        backbone.write_bytes(saved)
    assert_fails(result, stage, "models/backbone.pt could not be loaded safely", "pickled code", "dvc repro")
    assert not marker.exists()


# --- 12. a disk write failure ----------------------------------------------------------------------


def test_disk_full_while_writing_keeps_the_previous_output(project, unchanged):
    metrics = project.repo / "metrics"
    before = sorted(p.name for p in metrics.iterdir())
    result = project.stage("evaluate", fault="disk-full:evaluate.json")
    assert_fails(result, "evaluate", "No space left on device", "free disk space", "earlier results are intact")
    assert sorted(p.name for p in metrics.iterdir()) == before  # no temporary file left behind


# --- 14. the offline preset's data unavailable -------------------------------------------------------


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
    assert not (project.repo / "data").exists()


def test_offline_data_missing_and_mirror_unreachable_names_both_ways_and_writes_nothing(bare, tmp_path):
    project = offline_project(bare, tmp_path, mirror=True)
    with socket_closed_port() as port:
        result = project.stage("download", fault=f"mirror:http://127.0.0.1:{port}/")
    assert_fails(
        result, "download", "apt-get install dataset-fashion-mnist", "torchvision's mirrors failed",
        f"could not reach http://127.0.0.1:{port}/", "internet connection",
    )  # fmt: skip
    assert not list((project.repo / "data/raw").iterdir())  # the folder may exist; nothing in it


def test_obtain_fashion_mnist_with_unreachable_mirror_raises_both_fixes(tmp_path, monkeypatch):
    monkeypatch.setattr(fashion_mnist, "_MIRROR_RETRIES", 1)
    with socket_closed_port() as port, pytest.raises(UserError) as caught:
        fashion_mnist.obtain_fashion_mnist(
            tmp_path / "raw" / "fashion-mnist", debian_dir=tmp_path, mirror=True, mirrors=(f"http://127.0.0.1:{port}/",)
        )
    assert "apt-get install dataset-fashion-mnist" in str(caught.value) and "mirrors" in str(caught.value)
    assert not list((tmp_path / "raw").iterdir())


# --- security: no shell, only https/http/file URLs ------------------------------------------------


def test_no_shell_true_anywhere_in_the_pipeline():
    offenders = [
        f"{path.relative_to(REPO)}:{n}"
        for path in sorted((REPO / "pipeline").rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), start=1)
        if re.search(r"shell\s*=\s*True|os\.system\(|os\.popen\(", line)
    ]
    assert offenders == []


@pytest.mark.parametrize("url", ["ftp://example.invalid/a.zip", "gopher://x/a.zip", "/etc/passwd", "data/a.zip"])
def test_download_refuses_other_schemes_before_any_io(tmp_path, url):
    with pytest.raises(UserError, match=r"only https, http, file are allowed|not a file"):
        fetch.download(url, tmp_path / "a.zip", "0" * 64)
    assert list(tmp_path.iterdir()) == []


# --- 15. two queued experiments in parallel share the SQLite MLflow store ----------------------------


def git_dvc(repo: Path, env: dict[str, str], *args: str, timeout: float = 600) -> str:
    result = subprocess.run(args, cwd=repo, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{' '.join(args)}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout + result.stderr


@pytest.mark.e2e
def test_two_queued_experiments_in_parallel_are_both_recorded_in_mlflow(tmp_path, project):
    import mlflow

    repo = tmp_path / "queued"
    copy_project(repo)
    shutil.copy(project.repo / "params.yaml", repo / "params.yaml")
    set_params(repo, seeds=[0], train_scratch={"paper": {"epochs": 1}})
    env = {k: v for k, v in project.env.items() if k != "MLFLOW_TRACKING_URI"}  # the default store: DVC_ROOT's
    for command in (
        ["git", "init", "-q"], ["dvc", "init", "-q"], ["dvc", "config", "core.analytics", "false"],
        ["git", "add", "-A"], ["git", "commit", "-qm", "project"],
    ):  # fmt: skip
        git_dvc(repo, env, *command)
    for lr in ("0.001", "0.002"):
        git_dvc(repo, env, "dvc", "exp", "run", "--queue", "-n", f"lr-{lr}", "-S", f"train_scratch.paper.lr={lr}",
                "train_scratch")  # fmt: skip
    git_dvc(repo, env, "dvc", "queue", "start", "-j", "2")
    deadline = time.monotonic() + 600
    try:
        while True:
            status = git_dvc(repo, env, "dvc", "queue", "status")
            if not re.search(r"\b(Queued|Running)\b", status):
                break
            assert time.monotonic() < deadline, status
            time.sleep(2)
    finally:
        subprocess.run(["dvc", "queue", "stop", "--kill"], cwd=repo, env=env, capture_output=True, timeout=120)
    assert status.count("Success") == 2, status
    client = mlflow.MlflowClient(f"sqlite:///{repo / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("vit-paper")
    runs = client.search_runs([experiment.experiment_id])
    stages = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]  # one per job, its seeds nested in it
    assert sorted(r.data.params["train_scratch.paper.lr"] for r in stages) == ["0.001", "0.002"]
    assert {r.info.status for r in runs} == {"FINISHED"}
    assert {r.data.tags.get("dvc_experiment") for r in runs} == {"lr-0.001", "lr-0.002"}
    seeds = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert {r.data.tags["mlflow.parentRunId"] for r in seeds} == {r.info.run_id for r in stages}
    assert all(len(client.get_metric_history(r.info.run_id, "val_acc")) == 1 for r in seeds)
    shown = git_dvc(repo, env, "dvc", "exp", "show", "--csv")
    assert "lr-0.001" in shown and "lr-0.002" in shown  # dvc exp show lists both jobs


def test_unreadable_image_found_halfway_leaves_the_previous_prepared_data_whole(bare, tmp_path):
    """prepare writes the train split before it reaches test/; a failure there must not leave a mix."""
    set_params(bare.repo, paper={"folder": str(good_folder(tmp_path / "mine"))})
    bare.ok("download")
    bare.ok("prepare")
    prepared = bare.repo / "data/prepared"
    before = digest_tree(prepared)
    raw = bare.repo / "data/raw/images"
    shutil.copy(raw / "train/alpha/0.png", raw / "train/alpha/extra.png")  # the new train split would differ
    (raw / "test/beta/cut.jpg").write_bytes(truncated_jpeg())
    assert_fails(bare.stage("prepare"), "prepare", "data/raw/images/test/beta/cut.jpg", "not a readable image")
    assert digest_tree(prepared) == before
    assert not [p for p in prepared.parent.iterdir() if p.name.endswith(".partial")]
