"""pipeline.tracking.mlflow_store: where the MLflow store is, and how a stage writes to it beside others."""

from __future__ import annotations

import pytest


def test_tracking_uri_defaults_to_sqlite_under_dvc_root_and_env_overrides(tmp_path, monkeypatch):
    from pipeline.tracking.mlflow_store import tracking_uri

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    assert tracking_uri() == f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://tracking.example:5000")
    assert tracking_uri() == "http://tracking.example:5000"


def test_a_locked_database_is_retried_for_a_minute_or_two_not_a_few_seconds(monkeypatch):
    """Three and a half seconds of backoff used to be all a write got before the tracker gave up."""
    from pipeline.tracking import mlflow_store

    clock = [0.0]
    monkeypatch.setattr(mlflow_store.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(mlflow_store.time, "sleep", lambda s: clock.__setitem__(0, clock[0] + s + 5.0))  # +SQLite 5 s

    def locked_until(t: float):
        def action():
            if clock[0] < t:
                raise RuntimeError("(sqlite3.OperationalError) database is locked")
            return "written"

        return action

    assert mlflow_store.retry_when_locked(locked_until(90.0)) == "written"
    clock[0] = 0.0
    with pytest.raises(RuntimeError, match="database is locked"):
        mlflow_store.retry_when_locked(locked_until(10_000.0))
    assert mlflow_store._LOCKED_WAIT_S <= clock[0] <= mlflow_store._LOCKED_WAIT_S + 8
    with pytest.raises(ValueError):  # any other error is not retried
        mlflow_store.retry_when_locked(lambda: (_ for _ in ()).throw(ValueError("bug")))


def test_the_store_lock_holds_a_sqlite_stores_folder_until_it_is_released(tmp_path):
    """Two processes creating MLflow's tables at once corrupt the schema: while one holds the lock, another
    cannot take it; a server's store takes no lock and makes no folder."""
    import fcntl
    import os

    from pipeline.tracking.mlflow_store import sqlite_path, store_lock

    folder = tmp_path / "store"
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    assert sqlite_path(uri) == folder / "mlflow.db" and sqlite_path("http://127.0.0.1:5000") is None

    def try_lock() -> bool:
        fd = os.open(folder, os.O_RDONLY)  # another open file description: what a second process would hold
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False
        finally:
            os.close(fd)

    with store_lock(uri):
        assert folder.is_dir() and not try_lock()
    assert try_lock()
    assert list(folder.iterdir()) == []  # a lock on the folder leaves no lock file behind
    with store_lock("http://127.0.0.1:5000"):
        pass
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]
