"""`dvc plots show` / `dvc plots diff` that render offline: ``python -m pipeline.tools.plots [REV ...]``.

DVC's default page loads vega, vega-lite and vega-embed from a CDN, so its plots are blank without internet.
This tool renders through ``.dvc/plots/offline.html``, a page template with the three libraries inlined
(pinned versions, each npm tarball checked against its SHA-256 below), and writes ``dvc_plots/index.html``.
No revision: `dvc plots show`; revisions: `dvc plots diff REV ...` (e.g. ``HEAD~1`` or a `dvc exp` name),
which overlays each data series of every revision. The template is committed; ``--rebuild`` makes it again
from npm (needs the registry once); ``--check`` opens the page in headless Chromium (if installed) and
counts the SVG plots it drew, with a screenshot beside the page.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

from pipeline.errors import UserError, stage_main
from pipeline.fetch import download
from pipeline.files import write_text

TEMPLATE = Path(".dvc/plots/offline.html")
DOWNLOADS = Path("data/downloads/npm")
REGISTRY = "https://registry.npmjs.org"
# name: (version, sha256 of the npm tarball); each tarball's browser build is package/build/<name>.min.js.
# vega-embed 6 renders vega 5 and vega-lite 5 specs, which is what dvc-render writes.
LIBRARIES = {
    "vega": ("5.33.0", "7b61f992d1a1e196e7f2eeb3d6176e5694949d0d4bbfea237a842d523dd6e1f3"),
    "vega-lite": ("5.23.0", "e4cbfdd8f6f1abe381c59cd558fd6a559c12b1496bfdf2e0c3295263a40fe4da"),
    "vega-embed": ("6.29.0", "ecf1ee709c2bac9e0a4ead6908114b05b62c71493e10a8a4308109bb070f8eb1"),
}
PAGE = """<!DOCTYPE html>
<html>
<head>
<meta charset="utf-8">
<title>DVC plots (offline: {versions})</title>
{libraries}
<script>
// SVG rather than canvas: the plots stay sharp when printed or zoomed, and a headless browser can check them.
const embedWithCanvas = vegaEmbed;
vegaEmbed = (element, spec, options) => embedWithCanvas(element, spec, {{renderer: "svg", ...options}});
</script>
<style>table {{ border-spacing: 15px; }} body {{ font-family: sans-serif; }}</style>
</head>
<body>
{{plot_divs}}
</body>
</html>
"""


def library_script(name: str, registry: str = REGISTRY, downloads: Path = DOWNLOADS) -> str:
    """The library's minified build from its verified npm tarball, as an inline ``<script>``."""
    version, sha256 = LIBRARIES[name]
    tarball = download(f"{registry}/{name}/-/{name}-{version}.tgz", downloads / f"{name}-{version}.tgz", sha256)
    with tarfile.open(tarball) as archive:  # one named member is read, nothing is extracted to disk
        code = archive.extractfile(f"package/build/{name}.min.js").read().decode()
    if "</script" in code.lower():
        raise UserError(f"{name} {version} holds '</script', so it cannot be inlined in a page")
    return f"<!-- {name} {version} (npm, sha256 {sha256[:16]}...) -->\n<script>{code}</script>"


def build_template(path: Path = TEMPLATE, registry: str = REGISTRY, downloads: Path = DOWNLOADS) -> Path:
    versions = ", ".join(f"{name} {spec[0]}" for name, spec in LIBRARIES.items())
    scripts = "\n".join(library_script(name, registry, downloads) for name in LIBRARIES)
    write_text(path, PAGE.format(versions=versions, libraries=scripts))
    return path


def check_in_chromium(page: str, screenshot: str | None = None, chromium: str = "chromium") -> str:
    """The page's DOM after a headless Chromium ran its scripts (no network); with ``screenshot``, a PNG too.

    Raises:
        UserError: Chromium is not installed (Debian: ``apt-get install chromium``).
    """
    import shutil

    if shutil.which(chromium) is None:
        raise UserError(f"{chromium} not found; install it (Debian: apt-get install chromium) to check the page")
    flags = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000"]
    url = Path(page).resolve().as_uri()
    if screenshot:
        subprocess.run([*flags, f"--screenshot={screenshot}", "--window-size=1100,1400", url],
                       capture_output=True, check=True, timeout=120)  # fmt: skip
    return subprocess.run([*flags, "--dump-dom", url], capture_output=True, text=True, check=True, timeout=120).stdout


def render(revisions: list[str], template: Path = TEMPLATE, out: str = "dvc_plots") -> str:
    """Runs DVC with the offline template; returns the page's path."""
    command = ["dvc", "plots", "diff", *revisions] if revisions else ["dvc", "plots", "show"]
    result = subprocess.run(
        [*command, "--html-template", str(template), "-o", out], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        detail = " ".join((result.stderr or result.stdout).split())[:400]
        raise UserError(f"`{' '.join(command)}` failed ({detail}); run it from the repository root")
    return str(Path(out) / "index.html")


@stage_main
def main() -> None:
    args = sys.argv[1:]
    if "--rebuild" in args or not TEMPLATE.is_file():
        print(f"plots: built {build_template()}")
    page = render([a for a in args if not a.startswith("--")])
    print(f"plots: wrote {page} (opens offline)")
    if "--check" in args:  # what a browser shows: every data series drawn as SVG, without the network
        svgs = check_in_chromium(page, screenshot="dvc_plots/screenshot.png").count("<svg")
        print(f"plots: headless Chromium drew {svgs} SVG plots; screenshot dvc_plots/screenshot.png")


if __name__ == "__main__":
    main()
