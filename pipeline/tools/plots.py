"""Offline `dvc plots show` / `dvc plots diff`: ``python -m pipeline.tools.plots [REV ...]`` (or ``vit-plots``).

DVC's default page loads vega, vega-lite and vega-embed from a CDN, so its plots are blank without internet.
The committed ``.dvc/config`` sets ``plots.html_template = plots/offline.html`` (DVC reads it relative to
``.dvc/``), so plain `dvc plots show` and `dvc plots diff` render through ``.dvc/plots/offline.html``, a page
template with the three libraries inlined (pinned versions, each npm tarball checked against its SHA-256 below).
This tool is a thin wrapper over those two commands: no revision runs `dvc plots show`, revisions run
`dvc plots diff REV ...` (e.g. ``HEAD~1`` or a `dvc exp` name), which overlays each data series of every
revision; DVC writes ``dvc_plots/index.html``. Where the DVC config names no page template (a project made by a
fresh `dvc init`), the tool passes the offline one with ``--html-template``. ``--rebuild`` makes the template
again from npm (needs the registry once); ``--check`` opens DVC's page in headless Chromium (if installed) and
counts the SVG plots it drew, with a screenshot beside the page.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from urllib.parse import unquote, urlparse

from pipeline.core.entry import stage_main, tool_parser
from pipeline.core.errors import UserError
from pipeline.core.files import write_text
from pipeline.data.fetch import download

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
    if shutil.which(chromium) is None:
        raise UserError(f"{chromium} not found; install it (Debian: apt-get install chromium) to check the page")
    flags = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000"]
    url = Path(page).resolve().as_uri()
    if screenshot:
        subprocess.run([*flags, f"--screenshot={screenshot}", "--window-size=1100,1400", url],
                       capture_output=True, check=True, timeout=120)  # fmt: skip
    return subprocess.run([*flags, "--dump-dom", url], capture_output=True, text=True, check=True, timeout=120).stdout


def dvc_executable() -> str:
    """The `dvc` on PATH, else the one beside this interpreter (``.venv/bin/python -m ...`` without activating).

    Raises:
        UserError: neither exists.
    """
    search = os.pathsep.join([os.environ.get("PATH", ""), str(Path(sys.executable).parent)])
    found = shutil.which("dvc", path=search)
    if found is None:
        raise UserError(
            "`dvc` not found on PATH; activate the environment (`. .venv/bin/activate`) or run `make install`"
        )
    return found


def configured_template() -> str | None:
    """``plots.html_template`` as DVC's config files set it here (the committed ``.dvc/config`` does), or None."""
    from dvc.config import Config, ConfigError

    try:
        return Config.from_cwd()["plots"].get("html_template")
    except ConfigError as error:
        raise UserError(f"DVC's config does not parse ({error}); fix .dvc/config") from None


def render(revisions: list[str], dvc: str = "dvc", template: Path = TEMPLATE) -> Path:
    """`dvc plots show`, or `dvc plots diff REV ...` with revisions; returns the page DVC wrote.

    Raises:
        UserError: DVC failed or loaded no plots.
    """
    command = [dvc, "plots", "diff", *revisions] if revisions else [dvc, "plots", "show"]
    if configured_template() is None:
        command += ["--html-template", str(template)]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    shown = " ".join(["dvc", *command[1:]])
    if result.returncode != 0:
        detail = " ".join((result.stderr or result.stdout).split())[:400]
        raise UserError(f"`{shown}` failed ({detail}); run it from the repository root")
    # DVC prints the page's file:// URI as its last word; nothing when it loaded no plots
    uris = [word for word in result.stdout.split() if word.startswith("file://")]
    if not uris:
        detail = " ".join((result.stderr or result.stdout).split())[:400]
        raise UserError(f"`{shown}` wrote no page ({detail}); run `dvc repro` first, or name revisions with plots")
    return Path(unquote(urlparse(uris[-1]).path))


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = tool_parser("pipeline.tools.plots", __doc__)
    parser.add_argument("revisions", nargs="*", metavar="REV", help="git revisions or dvc experiments to overlay")
    parser.add_argument("--rebuild", action="store_true", help=f"build {TEMPLATE} again from npm first")
    parser.add_argument("--check", action="store_true", help="count the plots headless Chromium draws, offline")
    return parser.parse_args(argv)


@stage_main
def main() -> None:
    args = parse_args(sys.argv[1:])
    dvc = dvc_executable()
    if args.rebuild or not TEMPLATE.is_file():
        print(f"plots: built {build_template()}")
    page = render(args.revisions, dvc)
    print(f"plots: DVC wrote {page} (opens offline)")
    if args.check:  # what a browser shows: every data series drawn as SVG, without the network
        screenshot = page.parent / "screenshot.png"
        svgs = check_in_chromium(str(page), screenshot=str(screenshot)).count("<svg")
        print(f"plots: headless Chromium drew {svgs} SVG plots; screenshot {screenshot}")


if __name__ == "__main__":
    main()
