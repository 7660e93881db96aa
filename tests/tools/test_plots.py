"""pipeline.tools.plots: an offline page template with vega, vega-lite and vega-embed inlined from verified
npm tarballs (served here on loopback), the committed template itself, plain `dvc plots show` rendering
through it by the committed .dvc/config, and the thin wrapper around DVC."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from helpers import ROOT
from loopback import running_server
from project_copy import clean_env
from tiny_project import run_cli

from pipeline.core.errors import UserError
from pipeline.tools import plots

DVC = str(Path(sys.executable).parent / "dvc")


def npm_tarball(name: str, code: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        data = code.encode()
        member = tarfile.TarInfo(f"package/build/{name}.min.js")
        member.size = len(data)
        archive.addfile(member, io.BytesIO(data))
    return buffer.getvalue()


@pytest.fixture
def registry(monkeypatch):
    """A loopback npm registry serving three fake libraries, pinned by their real SHA-256."""
    tarballs = {name: npm_tarball(name, f"window.{name.replace('-', '_')} = 1;") for name in plots.LIBRARIES}
    pins = {name: ("1.0.0", hashlib.sha256(data).hexdigest()) for name, data in tarballs.items()}
    monkeypatch.setattr(plots, "LIBRARIES", pins)
    with running_server() as server:
        for name, data in tarballs.items():
            server.routes[f"/{name}/-/{name}-1.0.0.tgz"] = [("ok", data)]
        yield server, tarballs


def test_template_inlines_every_library_and_keeps_dvc_s_placeholder(registry, tmp_path):
    server, _ = registry
    path = plots.build_template(tmp_path / "offline.html", registry=server.url(""), downloads=tmp_path / "npm")
    page = path.read_text()
    for name in plots.LIBRARIES:
        assert f"<script>window.{name.replace('-', '_')} = 1;</script>" in page
    assert "{plot_divs}" in page and "http" not in page  # nothing is fetched when the page opens


def test_a_tarball_that_is_not_the_pinned_one_is_refused(registry, tmp_path, monkeypatch):
    server, tarballs = registry
    server.routes["/vega/-/vega-1.0.0.tgz"] = [("ok", npm_tarball("vega", "alert('changed')"))]
    with pytest.raises(UserError, match="sha256 mismatch"):
        plots.build_template(tmp_path / "offline.html", registry=server.url(""), downloads=tmp_path / "npm")
    assert not (tmp_path / "offline.html").exists()


def test_a_library_that_would_close_the_script_tag_is_refused(registry, tmp_path, monkeypatch):
    server, _ = registry
    data = npm_tarball("vega", "var s = '</script>';")
    monkeypatch.setitem(plots.LIBRARIES, "vega", ("1.0.0", hashlib.sha256(data).hexdigest()))
    server.routes["/vega/-/vega-1.0.0.tgz"] = [("ok", data)]
    with pytest.raises(UserError, match="cannot be inlined"):
        plots.library_script("vega", registry=server.url(""), downloads=tmp_path / "npm")


def test_the_committed_template_holds_the_pinned_libraries_and_no_network_reference():
    page = (ROOT / plots.TEMPLATE).read_text()
    for name, (version, sha256) in plots.LIBRARIES.items():
        assert f"<!-- {name} {version} (npm, sha256 {sha256[:16]}...) -->" in page
    assert "{plot_divs}" in page
    assert "cdn.jsdelivr" not in page and 'src="http' not in page


def dvc_project(folder: Path, committed_config: bool) -> Path:
    """A DVC project (no git) with one plot, the committed page templates and, if asked, the committed config."""
    folder.mkdir(exist_ok=True)
    subprocess.run([DVC, "init", "--no-scm", "-q"], cwd=folder, env=clean_env(), check=True, timeout=120)
    shutil.copytree(ROOT / ".dvc" / "plots", folder / ".dvc" / "plots", dirs_exist_ok=True)
    if committed_config:
        shutil.copy(ROOT / ".dvc" / "config", folder / ".dvc" / "config")
    (folder / "loss.csv").write_text("step,loss\n0,1.1\n1,0.7\n2,0.4\n")
    (folder / "dvc.yaml").write_text("plots:\n  - loss.csv:\n      x: step\n      y: loss\n      title: Tiny loss\n")
    return folder


def assert_offline_page(page: str) -> None:
    """The offline template's page with the plot in it: vega inlined, no script fetched from anywhere."""
    assert "<!-- vega 5.33.0 (npm, sha256" in page and "Tiny loss" in page
    assert "<script src=" not in page and "cdn.jsdelivr" not in page


def test_plain_dvc_plots_show_renders_through_the_committed_offline_template(tmp_path):
    """The committed .dvc/config names the template relative to .dvc/, as DVC resolves plots.html_template."""
    from dvc.config import Config

    assert Config(dvc_dir=str(ROOT / ".dvc"), validate=True)["plots"]["html_template"] == "plots/offline.html"
    assert (ROOT / ".dvc" / "plots" / "offline.html").resolve() == (ROOT / plots.TEMPLATE).resolve()
    project = dvc_project(tmp_path, committed_config=True)
    result = subprocess.run(
        [DVC, "plots", "show"], cwd=project, env=clean_env(), capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert_offline_page((project / "dvc_plots" / "index.html").read_text())


def test_the_tool_runs_plain_dvc_and_passes_the_template_only_where_no_config_names_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", clean_env()["PATH"])
    for committed_config in (True, False):
        project = dvc_project(tmp_path / str(committed_config), committed_config)
        monkeypatch.chdir(project)
        assert (plots.configured_template() is None) is not committed_config
        status, out, err = run_cli(plots, monkeypatch, capsys)
        assert status == 0, err
        page = project / "dvc_plots" / "index.html"
        assert f"plots: DVC wrote {page.resolve()} (opens offline)" in out
        assert_offline_page(page.read_text())


def test_without_dvc_on_path_the_tool_says_how_to_get_it_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # no template here either: nothing is built or downloaded first
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    status, out, err = run_cli(plots, monkeypatch, capsys)
    assert status == 1 and out == ""
    assert err.strip() == (
        "error in stage plots: `dvc` not found on PATH; activate the environment (`. .venv/bin/activate`) "
        "or run `make install`"
    )
    assert list(tmp_path.iterdir()) == []


def test_the_pretraining_scale_template_orders_its_facets_by_number():
    """DVC hands the template CSV strings: faceted on the raw column, shots came out 10, 25, 5."""
    template = json.loads((Path(__file__).resolve().parents[2] / ".dvc/plots/pretraining_scale.json").read_text())
    (transform,) = template["transform"]
    column = template["encoding"]["column"]
    assert transform["calculate"] == "toNumber(datum.shots)" and column["field"] == transform["as"]
    assert column["sort"] == "ascending"
