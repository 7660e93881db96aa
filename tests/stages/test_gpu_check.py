"""benchmarks/gpu_check.py on the CPU at tiny size: its fast checks pass and its JSON has the documented shape; a
check that raises is recorded in one line without stopping the others, and a spent budget skips what is left.

The checks through `dvc repro` (tiny_pipeline and determinism: minutes each on 2 cores; paper_preset: twelve
stage processes) are left to `make gpu-check`; tests/stages/test_e2e.py and test_e2e_offline.py run the same
stages on the CPU."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import time

import pytest
from helpers import ROOT
from project_copy import clean_env

SCRIPT = ROOT / "benchmarks" / "gpu_check.py"
METRICS_JSON = ROOT / "metrics" / "gpu_check.json"

pytestmark = pytest.mark.e2e


def gpu_check():
    """The script as a module (benchmarks/ is no package; its imports of bench_vit and tiny_outputs need the path)."""
    if str(SCRIPT.parent) not in sys.path:
        sys.path.insert(0, str(SCRIPT.parent))
    return importlib.import_module("gpu_check")


def test_fast_checks_pass_on_the_cpu_and_report_the_documented_json(tmp_path):
    out = tmp_path / "check.json"
    command = [sys.executable, str(SCRIPT), "--device", "cpu", "--size", "tiny", "--checks", "torchrun,e"]
    committed = METRICS_JSON.stat().st_mtime_ns if METRICS_JSON.exists() else None
    result = subprocess.run(
        [*command, "--out", str(out)], cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert (METRICS_JSON.stat().st_mtime_ns if METRICS_JSON.exists() else None) == committed  # only a GPU writes it
    report = json.loads(out.read_text())
    assert json.loads(result.stdout) == report
    assert set(report) == {"machine", "settings", "checks"}
    assert {"cpu", "cpu_flags", "torch", "torchvision", "cuda", "git_commit", "gpus"} <= set(report["machine"])
    assert report["settings"] == {"device": "cpu", "size": "tiny", "precision": "fp32", "budget_s": 540.0}
    assert list(report["checks"]) == ["throughput", "torchrun"]  # cheapest first, whatever order was asked
    for check in report["checks"].values():
        assert check["ok"] is True and check["seconds"] >= 0 and "error" not in check
    throughput = report["checks"]["throughput"]
    assert throughput["model"] == "tiny" and set(throughput["images_per_s"]) == {"ours", "torchvision"}
    rates = throughput["images_per_s"]
    assert throughput["ratio"] == pytest.approx(rates["ours"] / rates["torchvision"], rel=1e-3)
    torchrun = report["checks"]["torchrun"]
    assert (torchrun["nproc"], torchrun["backend"], torchrun["models"]) == (2, "gloo", ["seed_0.pt"])


def test_a_failing_check_is_one_line_and_a_spent_budget_skips_the_rest(tmp_path):
    module = gpu_check()
    ctx = module.Context("cpu", "tiny", time.monotonic() + 60, tmp_path)

    def failing(_):
        raise RuntimeError("dvc repro failed:\nRunning stage 'prepare':\nerror in stage prepare: no images\nERROR: x")

    failed = module.run_check("failing", failing, ctx, 60)
    assert failed["ok"] is False and failed["seconds"] >= 0
    assert failed["error"] == "RuntimeError: dvc repro failed: ... error in stage prepare: no images"
    passed = module.run_check("passing", lambda _: {"value": 1}, ctx, 60)
    assert passed == {"ok": True, "seconds": passed["seconds"], "value": 1}

    def hung(_):
        raise module.BudgetSpent("torchrun ... ran past the budget (60 s):\n[rank0]: waiting")

    stopped = module.run_check("hung", hung, ctx, 60)
    assert stopped["ok"] is None and stopped["skipped"].startswith("stopped at the budget of 60 s: BudgetSpent")
    ctx.deadline = time.monotonic() - 1
    skipped = module.run_check("late", failing, ctx, 60)
    assert skipped["ok"] is None and "budget of 60 s" in skipped["skipped"]
    assert module.exit_status({"a": passed, "b": skipped}) == 2
    assert module.exit_status({"a": passed, "b": skipped, "c": failed}) == 1
    assert module.exit_status({"a": passed}) == 0
