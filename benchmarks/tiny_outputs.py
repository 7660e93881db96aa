"""Every output of the committed pipeline on a tiny offline fixture, through real ``dvc repro``, as MD5s.

For refactors that must change no output (a module moved, a function split): run it before and after and
compare the two listings, e.g.

    python benchmarks/tiny_outputs.py > before.txt   # on the old commit
    python benchmarks/tiny_outputs.py > after.txt    # on the new one
    diff before.txt after.txt

The fixture is small IDX files written here (no Debian package, no network), one seed, one or two points per
matrix, the tiny sizes of tests/stages/test_e2e_offline.py. Files whose bytes hold the time or the machine
(repro_time, the runtime's probe cache) are listed by name with ``-`` for their hash.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from tiny_offline import listing, run_checked, tiny_project  # noqa: E402


def reproduce(repo: Path, runtime: dict | None = None, timeout: float | None = None) -> list[str]:
    """Copies the project into ``repo``, writes the fixture, runs `dvc repro` there; returns
    :func:`tiny_offline.listing`.

    Args:
        repo: an empty folder.
        runtime: merged into the fixture's runtime section (e.g. ``{"device": "cuda", "precision": "bf16"}``).
        timeout: seconds each command may take (``subprocess.TimeoutExpired`` past it).

    Raises:
        RuntimeError: a command failed; the message holds the end of its output.
    """
    env = tiny_project(repo, runtime)
    run_checked(["dvc", "repro"], repo, env, timeout)
    return listing(repo)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="run in this folder and keep it (default: a temporary one)")
    args = parser.parse_args()
    repo = args.keep or Path(tempfile.mkdtemp(prefix="tiny-outputs-"))
    repo.mkdir(parents=True, exist_ok=True)
    try:
        rows = reproduce(repo)
    except RuntimeError as error:
        sys.exit(str(error))
    print("\n".join(rows))
    if not args.keep:
        shutil.rmtree(repo, ignore_errors=True)


if __name__ == "__main__":
    main()
