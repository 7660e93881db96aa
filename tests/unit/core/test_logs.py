"""The library logs through `logging`: one handler per stage process, its level from PIPELINE_LOG_LEVEL, an
optional time-stamped file, and the one-line error of a failed stage printed at any level."""

from __future__ import annotations

import logging

import pytest

from pipeline.core.entry import stage_main
from pipeline.core.errors import UserError
from pipeline.core.logs import setup_logging

log = logging.getLogger("pipeline.test")


@pytest.fixture(autouse=True)
def restore_logging():
    yield
    setup_logging()  # the level and handlers of every other test


def stage(*lines: tuple[int, str], fail: str | None = None):
    @stage_main
    def main() -> None:
        for level, text in lines:
            log.log(level, text)
        if fail:
            raise UserError(fail)

    return main


def test_info_by_default_warnings_prefixed_and_debug_hidden(monkeypatch, capsys):
    monkeypatch.delenv("PIPELINE_LOG_LEVEL", raising=False)
    stage((logging.DEBUG, "every step"), (logging.INFO, "epoch 1: val_acc 0.5"), (logging.WARNING, "slow"))()
    lines = capsys.readouterr().err.splitlines()
    assert lines[:2] == ["epoch 1: val_acc 0.5", "warning: slow"]
    assert lines[2].startswith("stage test_logs finished in ") and len(lines) == 3


def test_debug_shows_every_step_and_warning_is_quiet(monkeypatch, capsys):
    monkeypatch.setenv("PIPELINE_LOG_LEVEL", "debug")
    stage((logging.DEBUG, "every step"))()
    assert capsys.readouterr().err.splitlines()[0] == "every step"
    monkeypatch.setenv("PIPELINE_LOG_LEVEL", "WARNING")
    stage((logging.INFO, "epoch 1"), (logging.WARNING, "slow"))()
    assert capsys.readouterr().err == "warning: slow\n"  # not even the stage's closing line


def test_a_failed_stage_prints_its_one_line_even_when_quiet(monkeypatch, capsys):
    monkeypatch.setenv("PIPELINE_LOG_LEVEL", "ERROR")
    with pytest.raises(SystemExit) as stopped:
        stage((logging.INFO, "epoch 1"), fail="the data folder is empty; put images in it")()
    assert stopped.value.code == 1
    assert capsys.readouterr().err == "error in stage test_logs: the data folder is empty; put images in it\n"


def test_an_unknown_level_is_one_line_naming_the_variable(monkeypatch, capsys):
    monkeypatch.setenv("PIPELINE_LOG_LEVEL", "LOUD")
    with pytest.raises(SystemExit):
        stage((logging.INFO, "epoch 1"))()
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error in stage test_logs: PIPELINE_LOG_LEVEL is 'LOUD'; set it to one of DEBUG")


def test_the_log_file_gets_time_stamped_lines_of_every_level_shown(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PIPELINE_LOG_FILE", str(tmp_path / "stage.log"))
    monkeypatch.delenv("PIPELINE_LOG_LEVEL", raising=False)
    stage((logging.INFO, "epoch 1: val_acc 0.5"), (logging.WARNING, "slow"))()
    logging.getLogger("pipeline").handlers[-1].flush()
    lines = (tmp_path / "stage.log").read_text().splitlines()
    assert lines[0].endswith(" INFO pipeline.test: epoch 1: val_acc 0.5") and lines[0][:4].isdigit()
    assert lines[1].endswith(" WARNING pipeline.test: slow")
