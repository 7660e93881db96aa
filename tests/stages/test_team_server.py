"""A team's MLflow server: `mlflow server` on loopback (SQLite backend, a folder as artifact store), a stage
pointed at it with MLFLOW_TRACKING_URI, its runs, metrics and artifacts read back through the client."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request

import pytest
from loopback import free_port

from pipeline.stages import analysis


@pytest.fixture
def team_server(tmp_path_factory):
    """`mlflow server` as the README gives it, with a database backend and a separate artifact store."""
    root = tmp_path_factory.mktemp("server")
    port = free_port()
    command = [
        sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
        "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}", "--artifacts-destination", str(root / "artifacts"),
        "--workers", "1",
    ]  # fmt: skip
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    try:
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            assert server.poll() is None, f"mlflow server exited: {server.stderr.read()[-2000:]}"
            assert time.monotonic() < deadline, "mlflow server did not answer /health within 120 s"
            time.sleep(0.5)
        yield url, root
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()


def test_a_stage_records_its_runs_metrics_and_artifacts_on_the_team_server(project, team_server, monkeypatch):
    import mlflow

    url, root = team_server
    monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
    analysis.main()
    client = mlflow.MlflowClient(url)
    experiment = client.get_experiment_by_name("vit-offline")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == "analysis" and run.info.status == "FINISHED"
    resolution = json.loads((project / "metrics" / "resolution.json").read_text())
    assert run.data.metrics["resolution.train_size.test_acc.mean"] == resolution["train_size"]["test_acc"]["mean"]
    names = sorted(a.path for a in client.list_artifacts(run.info.run_id))
    assert names == ["attention.png", "position_similarity.png"]
    # the artifacts went through the server into its artifact store, not into the project
    stored = sorted(p.name for p in (root / "artifacts").rglob("*.png"))
    assert stored == ["attention.png", "position_similarity.png"]
    assert not (project / "mlartifacts").exists() and not (project / "mlflow.db").exists()
