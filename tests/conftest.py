"""Test ordering for `pytest -n 2 --dist loadfile` (helpers shared by tests live in tests/helpers.py)."""

from __future__ import annotations

import os
import tempfile

pytest_plugins = ["tiny_project"]  # its `project` fixture: a tiny trained-looking project folder


def pytest_collection_modifyitems(config, items):
    """The paper preset's `dvc repro` fixture first: it is the longest file, so under `pytest -n 2 --dist
    loadfile` the other worker works through everything else meanwhile instead of waiting at the end."""
    items.sort(key=lambda item: 0 if item.path.name == "test_e2e.py" else 1)


def pytest_configure(config):
    """The bf16 step probe's answer is cached per machine (``pipeline.train.runtime.probe_cache_path``); a test suite
    running two workers would record a contended measurement there for the user's next `make repro`. Tests and
    the stage processes they start keep theirs in a folder of their own."""
    os.environ.setdefault("PIPELINE_CACHE_DIR", tempfile.mkdtemp(prefix="vit-probe-cache-"))
    from pipeline.core.logs import setup_logging

    setup_logging()  # library calls outside a stage log as a stage does ("warning: ..." on stderr)
