"""Test ordering for `pytest -n 2 --dist loadfile` (helpers shared by tests live in tests/helpers.py)."""

from __future__ import annotations

pytest_plugins = ["tiny_project"]  # its `project` fixture: a tiny trained-looking project folder


def pytest_collection_modifyitems(config, items):
    """The paper preset's `dvc repro` fixture first: it is the longest file, so under `pytest -n 2 --dist
    loadfile` the other worker works through everything else meanwhile instead of waiting at the end."""
    items.sort(key=lambda item: 0 if item.path.name == "test_e2e.py" else 1)
