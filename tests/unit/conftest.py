"""Fixtures of the download tests (test_fetch.py, test_fashion_mnist.py): a loopback server, a dead URL,
recorded backoff waits."""

from __future__ import annotations

import pytest
from loopback import free_port, running_server

from pipeline.data import fetch


@pytest.fixture
def server():
    with running_server() as s:
        yield s


@pytest.fixture
def dead_url() -> str:
    """A loopback URL with nothing listening, so connecting is refused."""
    return f"http://127.0.0.1:{free_port()}/file.bin"


@pytest.fixture
def sleeps(monkeypatch) -> list[float]:
    """Records the backoff waits instead of sleeping through them."""
    waits: list[float] = []
    monkeypatch.setattr(fetch.time, "sleep", waits.append)
    return waits
