"""pipeline.core.errors: one line per user error, tracebacks only for bugs."""

from __future__ import annotations

import pytest

from pipeline.core.entry import stage_main
from pipeline.core.errors import UserError

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


def test_a_script_is_named_by_its_file_not_as_main(tmp_path):
    """`torchrun train_once.py` runs a script whose module is __main__: its one line names the file, as a stage's
    names its module (the distributed tests' stop message depends on it)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "train_once.py"
    script.write_text(
        "from pipeline.core.entry import stage_main\n"
        "from pipeline.core.errors import UserError\n"
        "@stage_main\n"
        "def main():\n"
        "    raise UserError('the data folder is empty')\n"
        "main()\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    env.pop("PIPELINE_DEBUG", None)
    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert result.returncode == 1
    assert result.stderr == "error in stage train_once: the data folder is empty\n"


def test_stage_main_reraises_with_pipeline_debug_and_passes_other_errors(monkeypatch):
    monkeypatch.setenv("PIPELINE_DEBUG", "1")
    with pytest.raises(UserError, match="data folder is empty"):
        stage_main(fails_with_user_error)()
    monkeypatch.delenv("PIPELINE_DEBUG")

    def bug() -> None:
        raise KeyError("a programming error keeps its traceback")

    with pytest.raises(KeyError):
        stage_main(bug)()


# --- one run of a stage at a time -------------------------------------------------------------------


HOLD_LOCK = """
import sys, time
from pipeline.core.entry import one_run_at_a_time

with one_run_at_a_time("summary", []):
    print("holding", flush=True)
    sys.stdin.read()  # until the test closes stdin
"""


def test_a_second_direct_run_of_a_stage_stops_in_one_line_naming_the_first(tmp_path, monkeypatch, capsys):
    import subprocess
    import sys
    from pathlib import Path

    from pipeline.stages import summary

    repo = Path(__file__).resolve().parents[3]
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PIPELINE_DEBUG", raising=False)
    monkeypatch.setattr(sys, "argv", ["summary"])
    env = {"PYTHONPATH": str(repo), "PATH": "/usr/bin:/bin"}
    first = subprocess.Popen([sys.executable, "-c", HOLD_LOCK], cwd=tmp_path, env=env, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert first.stdout.readline() == "holding\n"
        with pytest.raises(SystemExit):
            summary.main()
        assert capsys.readouterr().err == (
            f"error in stage summary: another run of stage summary (pid {first.pid}) is writing this project's "
            "outputs (lock .locks/summary.lock); wait for it to finish or stop it, then rerun\n"
        )
    finally:
        first.stdin.close()
        first.wait(timeout=60)
    with pytest.raises(SystemExit):
        summary.main()  # the lock went with the first run: this one gets as far as its missing inputs
    assert "another run" not in capsys.readouterr().err


def test_the_lock_is_per_stage_and_item_and_skipped_on_other_ranks(tmp_path, monkeypatch):
    from pipeline.core.entry import one_run_at_a_time

    monkeypatch.chdir(tmp_path)
    with one_run_at_a_time("sweep", ["scratch", "0"]), one_run_at_a_time("sweep", ["scratch", "1"]):
        monkeypatch.setenv("RANK", "1")
        with one_run_at_a_time("sweep", ["scratch", "0"]):  # rank 1 of the same torchrun job
            pass
        monkeypatch.setenv("RANK", "0")
        with (
            pytest.raises(UserError, match=r"another run of stage sweep \(pid \d+\)"),
            one_run_at_a_time("sweep", ["scratch", "0"]),
        ):
            pass


def test_a_lock_left_by_a_killed_run_is_taken_over_in_one_line_and_a_finished_run_leaves_none(
    tmp_path, monkeypatch, caplog
):
    import logging
    import signal
    import subprocess
    import sys
    from pathlib import Path

    from pipeline.core.entry import LOCKS, one_run_at_a_time

    repo = Path(__file__).resolve().parents[3]
    monkeypatch.chdir(tmp_path)
    env = {"PYTHONPATH": str(repo), "PATH": "/usr/bin:/bin"}
    killed = subprocess.Popen([sys.executable, "-c", HOLD_LOCK], cwd=tmp_path, env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert killed.stdout.readline() == "holding\n"
    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=60)
    with caplog.at_level(logging.INFO, logger="pipeline.stages"), one_run_at_a_time("summary", []):
        pass
    assert f"summary: taking over lock {LOCKS / 'summary.lock'}, left by pid {killed.pid}, which stopped" in caplog.text
    assert (LOCKS / "summary.lock").read_text() == ""  # this run ended: the next one takes over nothing
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="pipeline.stages"), one_run_at_a_time("summary", []):
        pass
    assert "taking over" not in caplog.text


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError("[pair.cc:534] Read error [127.0.0.1]:41234: Connection reset by peer"),
        RuntimeError("[pair.cc:598] Connection closed by peer [127.0.0.1]:41234"),
        RuntimeError("[pair.cc:446] Write error [127.0.0.1]:41234: Broken pipe"),  # the dead rank's socket written
        RuntimeError("[pair.cc:320] Socket closed"),
        RuntimeError("Application timeout caused pair closure"),
    ],
)
def test_a_collective_broken_by_a_dead_rank_ends_in_the_one_line_that_names_it(error, monkeypatch):
    from pipeline.core.entry import _one_line

    monkeypatch.delenv("PIPELINE_DEBUG", raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    line, status = _one_line(error, "train_once", 1.0)
    assert status == 1 and "another process of this torchrun job stopped" in line
    monkeypatch.setenv("WORLD_SIZE", "1")  # alone, the same error is a bug: its traceback is the message
    assert _one_line(error, "train_once", 1.0) == (None, 0)
