"""Does `make ui`'s address open MLflow on the runs? A real `mlflow ui` and a real headless browser, on loopback.

    python benchmarks/mlflow_ui_check.py [--out DIR]

Records two runs into a new store the way a stage does (``pipeline.tracking.tracker.Tracker``, so the experiment
carries the pipeline's tags), starts ``mlflow ui`` on a free loopback port, and loads two addresses in headless
Chromium (Debian's ``chromium``, installed with apt-get when missing and run as root): the runs page that
``pipeline.tools.compare.runs_page`` prints (``...#/experiments/<id>/runs?workflowType=machine_learning``) and the
same page without ``workflowType``. For each it saves a screenshot (``DIR/runs_page.png``, ``DIR/no_workflow.png``)
and the rendered DOM, and reports which workspace the page opened in (model training: a side bar with the model
registry; GenAI: traces, evaluation runs, prompts) and whether the runs' names are on it. Exits 1 unless the
printed address lists both runs in the model-training workspace (measured with MLflow 3.17.2: it does; without
``workflowType`` the same page opens in the GenAI workspace, as "Training runs" under its GenAI side bar). Needs no
network beyond loopback; about a minute and a half on 2 cores, most of it Chromium's start.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
RUN_NAMES = ("ui-check-seed-0", "ui-check-seed-1")
BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def browser() -> str:
    """A headless-capable Chromium, installed from Debian's packages when none is on PATH (root only)."""
    for name in BROWSERS:
        if found := shutil.which(name):
            return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        install = ["apt-get", "install", "-y", "-q", "chromium"]
        if subprocess.run(install, capture_output=True).returncode != 0:
            subprocess.run(["apt-get", "update", "-q"], capture_output=True)
            subprocess.run(install, capture_output=True, check=True)
        return shutil.which("chromium") or sys.exit("apt-get installed chromium, but it is not on PATH")
    sys.exit("no Chromium on PATH: install Debian's chromium (apt-get install chromium) and rerun")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def record_runs(uri: str) -> None:
    """Two runs in the experiment ``vit-offline``, through the tracker every stage uses."""
    os.environ["MLFLOW_TRACKING_URI"] = uri
    os.environ["PIPELINE_SYSTEM_METRICS"] = "0"
    from pipeline.tracking.tracker import Tracker

    for step, name in enumerate(RUN_NAMES):
        with Tracker("vit-offline", name, {"stage": "ui_check"}, {"seed": str(step)}) as tracker:
            tracker.log_metrics({"test_acc": 0.5 + 0.1 * step}, step=0)


@contextlib.contextmanager
def mlflow_ui(uri: str, port: int, deadline_s: float = 120.0):
    """``mlflow ui`` on ``127.0.0.1:port``, up (its /health answers) before the block, stopped after it."""
    command = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--host", "127.0.0.1",
               "--port", str(port)]  # fmt: skip
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        started, health = time.monotonic(), f"http://127.0.0.1:{port}/health"
        while time.monotonic() - started < deadline_s:
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(health, timeout=2) as up,
            ):
                if up.status == 200:
                    break
            if server.poll() is not None:
                sys.exit(f"mlflow ui exited with status {server.returncode} before answering")
            time.sleep(0.5)
        else:
            sys.exit(f"mlflow ui did not answer on port {port} within {deadline_s:.0f} s")
        yield f"http://127.0.0.1:{port}"
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)


def render(chromium: str, url: str, screenshot: Path, profile: Path) -> str:
    """The page's DOM after its scripts ran, and a screenshot of it."""
    common = [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
              f"--user-data-dir={profile}", "--window-size=1440,900", "--virtual-time-budget=20000"]  # fmt: skip
    subprocess.run([*common, f"--screenshot={screenshot}", url], capture_output=True, timeout=180, check=True)
    return subprocess.run([*common, "--dump-dom", url], capture_output=True, text=True, timeout=180, check=True).stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(tempfile.mkdtemp(prefix="mlflow-ui-check-")))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    chromium = browser()
    with tempfile.TemporaryDirectory() as folder:
        uri = f"sqlite:///{Path(folder) / 'mlflow.db'}"
        record_runs(uri)
        from pipeline.tools.compare import runs_page

        with mlflow_ui(uri, free_port()) as ui:
            printed = runs_page(uri, "vit-offline", ui=ui)
            pages = {"runs_page": printed, "no_workflow": printed.split("?")[0]}
            result = {}
            for name, url in pages.items():
                dom = render(chromium, url, args.out / f"{name}.png", Path(folder) / f"profile-{name}")
                (args.out / f"{name}.html").write_text(dom)
                result[name] = {
                    "url": url,
                    "runs_listed": [run for run in RUN_NAMES if run in dom],
                    "screenshot": str(args.out / f"{name}.png"),
                }
    print(json.dumps(result, indent=2))
    printed = result["runs_page"]
    if printed["runs_listed"] != list(RUN_NAMES) or printed["workspace"] != "model training":
        sys.exit("the printed address does not open the runs in the model-training workspace")


if __name__ == "__main__":
    main()
