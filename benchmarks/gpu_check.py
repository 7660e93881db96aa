"""The GPU check: the pipeline's CUDA paths in one command, ``make gpu-check``, bounded by ``--budget-s``.

Five checks, each timed and guarded: one that fails is recorded with its one-line error (its full message goes to
stderr) and the others still run. In the order they run, cheapest first, so that a spent budget skips the
costliest (issue 40's letters in brackets):

- ``throughput`` (e): images/s of our ViT and torchvision's with the same weights, forward+backward, timed in
  alternation in this process; B/16 in bf16 autocast on CUDA, the ``tiny`` preset in fp32 on a CPU.
- ``torchrun`` (d): ``torchrun --standalone -m pipeline.stages.train_scratch`` in a tiny project, one process per
  GPU (NCCL between them; one GPU is one process, without a process group), two gloo processes on a CPU.
- ``paper_preset`` (c): ``dvc repro evaluate`` on the paper preset (download, prepare, backbone, train_scratch,
  linear_probe, the curve's sweeps at one point, evaluate) on generated images served on loopback, the backbone's
  weights served as torchvision's legacy-named state dict (``mlp.linear_1``); B/16 on CUDA, ``tiny`` on a CPU.
- ``tiny_pipeline`` (a): benchmarks/tiny_outputs.py's offline fixture through real ``dvc repro`` with
  ``runtime.device`` set to the device, bf16 on CUDA and fp32 on a CPU.
- ``determinism`` (b): that run again (or twice, without ``tiny_pipeline``); its output MD5s must be equal where
  the stages' ``resolve_runtime`` turns on ``torch.use_deterministic_algorithms`` (a subprocess asks it; it does,
  warn_only, on CPU and CUDA alike), and a difference is only reported where it does not.

Prints a JSON object, ``{"machine": {...}, "settings": {...}, "checks": {name: {"ok", "seconds", ...}}}``, and
writes it to metrics/gpu_check.json when it runs on CUDA (and to ``--out`` where given). A check the budget
skipped, or stopped midway, has ``"ok": null`` and a ``skipped`` note. Exit status: 0 all passed, 1 one or more
failed, 2 none failed but the budget skipped some. On a 2-core CPU every check takes about 11 minutes (each tiny
run about 5): give it ``--budget-s 900``. The fast checks, as tests/stages/test_gpu_check.py runs them::

    .venv/bin/python benchmarks/gpu_check.py --device cpu --checks throughput,torchrun --out /tmp/check.json
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torchvision
from bench_vit import build_models
from tiny_outputs import reproduce

from pipeline.core.files import load_tensors, read_json
from pipeline.train.runtime import Runtime, cpu_capability, cpu_name, cpuinfo_flags

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from project_copy import clean_env, copy_project, set_params  # noqa: E402
from tiny_offline import write_fixture  # noqa: E402

METRICS_JSON = REPO / "metrics" / "gpu_check.json"
# The CPU features that decide speed and bf16 (x86, then arm64), of the hundred /proc/cpuinfo lists.
CPU_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16", "asimd", "sve", "bf16")
# A traceback's last line, e.g. `[rank1]: TypeError: train() got an unexpected keyword argument`
EXCEPTION_LINE = re.compile(r"\b\w*(?:Error|Exception): \S")
LETTERS = {"a": "tiny_pipeline", "b": "determinism", "c": "paper_preset", "d": "torchrun", "e": "throughput"}


class CheckFailed(Exception):
    """A check's verdict against it, with what it measured on the way."""

    def __init__(self, message: str, details: dict):
        super().__init__(message)
        self.details = details


class BudgetSpent(RuntimeError):
    """A command stopped at the deadline: the check did not finish, which says nothing of what it checks."""


@dataclass
class Context:
    """What every check reads: the device, the size, the deadline and a scratch folder."""

    device: str  # "cpu" | "cuda"
    size: str  # "tiny" | "full"
    deadline: float  # time.monotonic() past which no check starts and every command is stopped
    work: Path
    listings: list[list[str]] = field(default_factory=list)  # tiny_outputs' MD5 listing of each tiny run

    @property
    def precision(self) -> str:
        # fp32 on a CPU: tiny_outputs' own, and bf16 is emulated (a step ~12x slower) where AVX512-BF16/AMX is missing
        return "bf16" if self.device == "cuda" else "fp32"

    def runtime(self, **extra) -> dict:
        """params.yaml's runtime section for the stages this check starts."""
        return {"device": self.device, "precision": self.precision, **extra}

    def left(self) -> float:
        return max(self.deadline - time.monotonic(), 1.0)


def run(command: list[str], cwd: Path, env: dict[str, str], timeout: float) -> str:
    """Runs ``command`` and returns its output; raises RuntimeError with its end when it fails or runs past
    ``timeout``. In a session of its own, so that a timeout also stops its children (dvc's stage, torchrun's
    workers)."""
    with subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          start_new_session=True) as process:  # fmt: skip
        try:
            output, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate()
            message = f"{' '.join(command)} ran past the budget ({timeout:.0f} s):\n{output[-6000:]}"
            raise BudgetSpent(message) from None
    if process.returncode:
        raise RuntimeError(f"{' '.join(command)} failed with status {process.returncode}:\n{output[-6000:]}")
    return output


def stage_env(repo: Path) -> dict[str, str]:
    """The environment of a stage in ``repo``: its own MLflow store and probe cache, DVC without analytics."""
    env = clean_env()
    env.update(MLFLOW_TRACKING_URI=f"sqlite:///{repo / 'mlflow.db'}", PIPELINE_CACHE_DIR=str(repo / ".cache"),
               DVC_NO_ANALYTICS="1")  # fmt: skip
    return env


def one_line(error: BaseException) -> str:
    """The error's first line, then the line of its output that names the cause: a traceback's exception (the
    first, as a failed rank's comes before the notices of the ranks torchrun stopped), else a stage's own
    ``error in stage X: ...`` or dvc's ``ERROR: ...``, else the last line."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()] or [""]
    first, rest = f"{type(error).__name__}: {lines[0]}", lines[1:]
    said = [line for line in rest if EXCEPTION_LINE.search(line)]
    said = said or [line for line in rest if line.startswith(("error in stage", "ERROR"))] or rest[-1:]
    return f"{first} ... {said[0]}"[:600] if said else first[:600]


def check_throughput(ctx: Context) -> dict:
    """Images/s of a training step (forward, backward, SGD) of our ViT and torchvision's, same weights."""
    full = ctx.size == "full"
    name, batch, warmup, reps = ("B/16", 128, 3, 10) if full else ("tiny", 16, 1, 3)
    device = torch.device(ctx.device)
    runtime = Runtime(device, ctx.precision)
    models = {key: model.to(device) for key, model in build_models(name).items()}
    config = models["ours"].config
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(batch, config.in_channels, config.image_size, config.image_size, generator=generator)
    labels = torch.randint(config.num_classes, (batch,), generator=generator)
    images, labels = images.to(device), labels.to(device)
    steps = {key: training_step(model, images, labels, runtime) for key, model in models.items()}
    # CUDA runs asynchronously: without a sync the clock would stop when the kernels are queued, not done
    sync = torch.cuda.synchronize if device.type == "cuda" else lambda: None
    rates: dict[str, list[float]] = {key: [] for key in steps}
    for rep in range(warmup + reps):
        for key in list(steps) if rep % 2 == 0 else list(steps)[::-1]:  # who goes first alternates too
            sync()
            started = time.perf_counter()
            steps[key]()
            sync()
            if rep >= warmup:
                rates[key].append(batch / (time.perf_counter() - started))
    del models, steps
    if device.type == "cuda":
        torch.cuda.empty_cache()  # the stages this script starts next want the memory
    ours, reference = statistics.median(rates["ours"]), statistics.median(rates["torchvision"])
    ratios = [o / r for o, r in zip(rates["ours"], rates["torchvision"], strict=True)]
    print(f"gpu_check: throughput {name}: ours {ours:.1f} img/s, torchvision {reference:.1f} img/s, "
          f"ratio {ours / reference:.2f}", file=sys.stderr, flush=True)  # fmt: skip
    return {
        "model": name,
        "batch": batch,
        "precision": ctx.precision,
        "warmup": warmup,
        "reps": reps,
        "images_per_s": {"ours": round(ours, 2), "torchvision": round(reference, 2)},
        "ratio": round(ours / reference, 4),
        "ratio_range": [round(min(ratios), 4), round(max(ratios), 4)],  # per rep: the noise
    }


def training_step(model: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor, runtime: Runtime) -> Callable:
    """A closure that runs one training step of ``model``, autocast (where bf16) around the forward pass only."""
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)

    def step() -> None:
        model.train()
        optimizer.zero_grad(set_to_none=True)
        with runtime.autocast():
            loss = torch.nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()

    return step


def check_torchrun(ctx: Context) -> dict:
    """train_scratch under torchrun on the tiny fixture, after its prepare stage; rank 0 writes the models."""
    repo = ctx.work / "torchrun"
    repo.mkdir()
    copy_project(repo)
    write_fixture(repo, ctx.runtime(threads=1))  # one thread a process: two processes share a 2-core CPU
    nproc = max(torch.cuda.device_count(), 1) if ctx.device == "cuda" else 2
    # the fixture's 12 training images in one batch an epoch: no rank's shard of it is empty, up to 12 GPUs
    set_params(repo, train_scratch={"offline": {"batch_size": 12}})
    env = stage_env(repo)
    run([sys.executable, "-m", "pipeline.stages.prepare"], repo, env, ctx.left())
    backend = ("nccl" if ctx.device == "cuda" else "gloo") if nproc > 1 else "none (one process, no process group)"
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or "torchrun"
    command = [torchrun, "--standalone", "--nproc_per_node", str(nproc), "-m", "pipeline.stages.train_scratch"]
    run(command, repo, env, ctx.left())
    models = sorted(path.name for path in (repo / "models" / "scratch").glob("seed_*.pt"))
    details = {"nproc": nproc, "backend": backend, "models": models}
    if not models:
        raise CheckFailed("torchrun finished but models/scratch holds no seed_*.pt", details)
    return details


def check_paper_preset(ctx: Context) -> dict:
    """``dvc repro evaluate`` on the paper preset, its images and legacy-named weights served on loopback."""
    # The end-to-end tests' generated ImageFolder zip and legacy renaming: one home each, imported, not copied.
    sys.path.insert(0, str(REPO / "tests" / "stages"))
    from loopback import running_server
    from test_e2e import image_folder_zip
    from test_torchvision_weights import legacy_names

    from pipeline.models.torchvision_reference import TORCHVISION_BUILDERS, torchvision_vit, torchvision_vit_from_config
    from pipeline.models.vit import vit_config

    model = "B/16" if ctx.size == "full" else "tiny"
    torch.manual_seed(0)
    if model in TORCHVISION_BUILDERS:
        reference = torchvision_vit(model)
    else:  # torchvision's ViT class at our tiny sizes, 10 classes like the end-to-end test's stand-in
        reference = torchvision_vit_from_config(vit_config(model, num_classes=10))
    state = reference.state_dict()
    weights = io.BytesIO()
    torch.save(legacy_names(state), weights)
    archive = image_folder_zip({"train": 6, "test": 3})
    repo = ctx.work / "paper"
    repo.mkdir()
    copy_project(repo)
    with running_server() as server:
        server.routes["/images.zip"] = [("ok", archive)]
        server.routes["/vit_legacy.pth"] = [("ok", weights.getvalue())]
        set_params(repo, **paper_params(ctx, model, server.url(""), archive, weights.getvalue()))
        env = stage_env(repo)
        for command in (["git", "init", "-q"], ["dvc", "init", "-q"], ["dvc", "repro", "evaluate"]):
            output = run(command, repo, env, ctx.left())
    ran = [line.split("'")[1] for line in output.splitlines() if line.startswith("Running stage '")]
    metrics = read_json(repo / "metrics" / "evaluate.json")
    saved = load_tensors(repo / "models" / "backbone.pt")
    details = {"model": model, "stages": ran, "runtime": metrics["runtime"],
               "test_acc": {arm: metrics[arm]["test_acc"]["mean"] for arm in ("scratch", "linear")},
               "backbone_equals_served": saved.keys() == state.keys()
               and all(torch.equal(saved[key].cpu(), value) for key, value in state.items())}  # fmt: skip
    if not details["backbone_equals_served"]:
        raise CheckFailed("models/backbone.pt differs from the legacy-named weights served", details)
    if not metrics["runtime"].startswith(f"{ctx.device} {ctx.precision}"):
        raise CheckFailed(f"evaluate ran on {metrics['runtime']!r}, not {ctx.device} {ctx.precision}", details)
    return details


def paper_params(ctx: Context, model: str, base: str, archive: bytes, weights: bytes) -> dict:
    """params.yaml's sections for the paper preset on the served files, each stage cut to a few steps."""
    one_lr = {"scratch": {"lrs": [0.001]}, "cnn": {"lrs": [0.001]}, "finetune": {"lrs": [0.0001]}}
    return {
        "preset": "paper",
        "seeds": [0],
        "runtime": ctx.runtime(),
        "paper": {"url": f"{base}/images.zip", "sha256": hashlib.sha256(archive).hexdigest(), "model": model,
                  "backbone_model": model, "weights_url": f"{base}/vit_legacy.pth",
                  "weights_sha256": hashlib.sha256(weights).hexdigest()},
        "train_scratch": {"paper": {"epochs": 1, "batch_size": 8}},
        "linear_probe": {"paper": {"epochs": 1, "batch_size": 8}},
        "validation": {"paper_per_class": 2},
        # 6 training images per class, 2 of them validation: the curve's one point is 4 per class
        "data_hunger": {"points": [0], "paper_fractions": [1.0], "offline_sizes": [10], "headline_point": 0,
                        "max_epochs": 1, "min_steps": 2, "scores": 2, "patience": 1, "plateau_window": 1,
                        "batch_size": 4, **one_lr},
    }  # fmt: skip


def tiny_run(ctx: Context) -> tuple[list[str], str]:
    """One run of tiny_outputs' fixture on the device: its MD5 listing and the runtime evaluate reports."""
    repo = ctx.work / f"tiny-{len(ctx.listings)}"
    repo.mkdir()
    rows = reproduce(repo, ctx.runtime(), timeout=ctx.left())
    ctx.listings.append(rows)
    runtime = read_json(repo / "metrics" / "evaluate.json")["runtime"]
    shutil.rmtree(repo, ignore_errors=True)
    return rows, runtime


def check_tiny_pipeline(ctx: Context) -> dict:
    """The committed pipeline through real ``dvc repro`` on the tiny offline fixture, on the device."""
    rows, runtime = tiny_run(ctx)
    details = {"outputs": len(rows), "runtime": runtime}
    if not runtime.startswith(f"{ctx.device} {ctx.precision}"):
        raise CheckFailed(f"evaluate ran on {runtime!r}, not {ctx.device} {ctx.precision}", details)
    return details


DETERMINISM_PROBE = """
import torch
from pipeline.core.config import RuntimeConfig
from pipeline.train.runtime import resolve_runtime
resolve_runtime(RuntimeConfig(device={device!r}, precision={precision!r}, threads=1, distributed="off"))
print(torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
"""


def check_determinism(ctx: Context) -> dict:
    """Two tiny runs (tiny_pipeline's and one more) give the same MD5s wherever the stages ask torch for
    deterministic algorithms; where they do not, a difference is reported, not failed."""
    while len(ctx.listings) < 2:
        tiny_run(ctx)
    first, second = (dict(row.split("  ", 1)[::-1] for row in rows) for rows in ctx.listings[:2])  # name: md5
    differ = sorted(name for name in first.keys() | second.keys() if first.get(name) != second.get(name))
    probe = DETERMINISM_PROBE.format(device=ctx.device, precision=ctx.precision)
    enabled, warn_only = run([sys.executable, "-c", probe], REPO, clean_env(), ctx.left()).split()[-2:]
    strict = enabled == "True"
    algorithms = ("on, warn_only" if warn_only == "True" else "on") if strict else "off"
    details = {"identical": not differ, "outputs": len(first), "differing": differ[:20],
               "deterministic_algorithms": algorithms}  # fmt: skip
    if differ and strict:
        raise CheckFailed(f"{len(differ)} of {len(first)} outputs differ between two runs, first {differ[0]}", details)
    return details


CHECKS: dict[str, Callable[[Context], dict]] = {
    "throughput": check_throughput,
    "torchrun": check_torchrun,
    "paper_preset": check_paper_preset,
    "tiny_pipeline": check_tiny_pipeline,
    "determinism": check_determinism,
}


def run_check(name: str, check: Callable[[Context], dict], ctx: Context, budget_s: float) -> dict:
    """``{"ok", "seconds", **details}`` of one check, ``error`` (one line) where it failed; ``"ok": None`` and a
    ``skipped`` note where the budget was spent before it started or before it finished."""
    if time.monotonic() >= ctx.deadline:
        return {"ok": None, "seconds": 0.0, "skipped": f"not started: the budget of {budget_s:.0f} s was spent"}
    print(f"gpu_check: {name} ...", file=sys.stderr, flush=True)
    started = time.perf_counter()
    try:
        result = {"ok": True, **check(ctx)}
    except (BudgetSpent, subprocess.TimeoutExpired) as error:  # tiny_outputs.reproduce's timeout: the latter
        result = {"ok": None, "skipped": f"stopped at the budget of {budget_s:.0f} s: {one_line(error)}"}
    except Exception as error:  # one check's failure, whatever it is, must not stop the others
        traceback.print_exc()
        result = {"ok": False, **getattr(error, "details", {}), "error": one_line(error)}
    seconds = round(time.perf_counter() - started, 1)
    verdict = {True: "ok", False: "FAILED", None: "stopped at the budget"}[result["ok"]]
    print(f"gpu_check: {name} {verdict} in {seconds} s", file=sys.stderr, flush=True)
    return {"ok": result.pop("ok"), "seconds": seconds, **result}


def machine() -> dict:
    """The machine and library versions, as a result's provenance."""
    flags = cpuinfo_flags() or frozenset()
    info = {"cpu": cpu_name(), "cpu_count": os.cpu_count(), "cpu_capability": cpu_capability(),
            "cpu_flags": [flag for flag in CPU_FLAGS if flag in flags], "python": platform.python_version(),
            "torch": torch.__version__, "torchvision": torchvision.__version__, "cuda": torch.version.cuda,
            "git_commit": git_commit(), "gpus": []}  # fmt: skip
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            info["gpus"].append({"name": props.name, "memory_gib": round(props.total_memory / 2**30, 1),
                                 "capability": f"{props.major}.{props.minor}"})  # fmt: skip
        info["cudnn"] = torch.backends.cudnn.version()
        with contextlib.suppress(AttributeError, RuntimeError):
            info["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    return info


def git_commit() -> str | None:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        result = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10)
        return result.stdout.strip() or None
    return None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="auto: cuda if available")
    parser.add_argument("--size", choices=("tiny", "full"), help="default: full on cuda, tiny on a CPU")
    known = ",".join(CHECKS)
    parser.add_argument("--checks", default=known, help=f"comma-separated, names or issue 40's letters a-e: {known}")
    parser.add_argument("--budget-s", type=float, default=540.0, help="no check starts after this many seconds")
    parser.add_argument("--out", type=Path, help="also write the JSON here (on CUDA it goes to metrics/ as well)")
    args = parser.parse_args(argv)
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    elif args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda, but torch sees no CUDA device")
    args.size = args.size or ("full" if args.device == "cuda" else "tiny")
    names = [LETTERS.get(name.strip(), name.strip()) for name in args.checks.split(",") if name.strip()]
    unknown = [name for name in names if name not in CHECKS]
    if unknown:
        parser.error(f"unknown checks {unknown}; known: {', '.join(CHECKS)} (or a-e)")
    args.checks = [name for name in CHECKS if name in names]  # cheapest first, whatever order they came in
    return args


def exit_status(checks: dict[str, dict]) -> int:
    """0 when every check passed, 1 when one failed, 2 when none failed but some were skipped."""
    oks = [check["ok"] for check in checks.values()]
    return 1 if False in oks else 2 if None in oks else 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    checks: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as work:
        ctx = Context(args.device, args.size, time.monotonic() + args.budget_s, Path(work))
        settings = {"device": ctx.device, "size": ctx.size, "precision": ctx.precision, "budget_s": args.budget_s}
        report = {"machine": machine(), "settings": settings, "checks": checks}
        for name in args.checks:
            checks[name] = run_check(name, CHECKS[name], ctx, args.budget_s)
    text = json.dumps(report, indent=1)
    targets = ([METRICS_JSON] if args.device == "cuda" else []) + ([args.out] if args.out else [])
    for target in targets:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text + "\n")
    print(text)
    return exit_status(checks)


if __name__ == "__main__":
    sys.exit(main())
