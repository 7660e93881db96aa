"""pipeline.errors: one line per user error, tracebacks only for bugs."""

from __future__ import annotations

import pytest

from pipeline.errors import UserError, stage_main

# --- errors ----------------------------------------------------------------------------------


def fails_with_user_error() -> None:
    raise UserError("the data folder is empty; put images in it")


def test_stage_main_prints_one_line_and_exits_1(capsys, monkeypatch):
    monkeypatch.delenv("PIPELINE_DEBUG", raising=False)
    with pytest.raises(SystemExit) as caught:
        stage_main(fails_with_user_error)()
    assert caught.value.code == 1
    stage = __name__.rsplit(".", 1)[-1]
    assert capsys.readouterr().err == f"error in stage {stage}: the data folder is empty; put images in it\n"


def test_stage_main_reraises_with_pipeline_debug_and_passes_other_errors(monkeypatch):
    monkeypatch.setenv("PIPELINE_DEBUG", "1")
    with pytest.raises(UserError, match="data folder is empty"):
        stage_main(fails_with_user_error)()
    monkeypatch.delenv("PIPELINE_DEBUG")

    def bug() -> None:
        raise KeyError("a programming error keeps its traceback")

    with pytest.raises(KeyError):
        stage_main(bug)()
