"""pipeline.tools.plots: an offline page template with vega, vega-lite and vega-embed inlined from verified
npm tarballs (served here on loopback), and the committed template itself."""

from __future__ import annotations

import hashlib
import io
import tarfile

import pytest
from helpers import ROOT
from loopback import running_server

from pipeline.errors import UserError
from pipeline.tools import plots


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
