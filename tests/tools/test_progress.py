"""Tool progress: the stage number, the total and the time left that `make repro` prints beside dvc repro's output."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import DOT
from project_copy import REPO, clean_env

from pipeline.tools.progress import (
    Display,
    Event,
    Plan,
    Progress,
    advance,
    progress_line,
    seconds_left,
)


def progress_of(measured: dict[str, float], to_run: set[str]) -> Progress:
    return Progress(Plan(stages=frozenset(to_run), to_run=frozenset(to_run)), measured, started=0.0)


def test_the_time_left_scales_the_measured_times_by_how_this_machine_went():
    measured = {"a": 100.0, "b": 200.0, "c": 300.0, "d": 600.0}
    progress = progress_of(measured, set(measured))
    assert seconds_left(progress, 0.0) == (1200.0, 0)
    advance(progress, Event("a", ran=True), 0.0)
    advance(progress, Event("b", ran=True), 150.0)  # a took 150 s, measured 100 s
    advance(progress, Event("c", ran=True), 450.0)  # b took 300 s, measured 200 s
    assert seconds_left(progress, 450.0) == (1.5 * (300 + 600), 0)
    assert seconds_left(progress, 500.0) == (1.5 * (300 + 600) - 50, 0)  # c has run for 50 s
    line = progress_line(progress, 450.0)
    assert line == "[stage 3/4] c — 7.5 min elapsed, about 22 min left (1.50x the measured times)"


def test_a_short_first_stage_does_not_rescale_the_estimate():
    """download's 0.4 measured seconds leave out its start-up: taking 4 s must not multiply the rest by 10."""
    progress = progress_of({"download": 0.4, "backbone": 140.0}, {"download", "backbone"})
    advance(progress, Event("download", ran=True), 0.0)
    advance(progress, Event("backbone", ran=True), 4.0)
    assert seconds_left(progress, 4.0) == (140.0, 0)


def test_an_up_to_date_stage_is_done_at_once_and_does_not_count_towards_the_ratio():
    progress = progress_of({"a": 100.0, "b": 200.0}, {"a", "b"})
    advance(progress, Event("a", ran=False), 0.0)
    advance(progress, Event("b", ran=True), 30.0)
    assert progress.done == {"a"} and progress.finished_measured_s == 0
    assert progress_line(progress, 30.0) == "[stage 2/2] b — 0.5 min elapsed, about 3 min left"


def test_an_unmeasured_stage_counts_as_the_median_and_the_line_says_so():
    progress = progress_of({"a": 60.0, "b": 120.0, "c": 600.0}, {"a", "b", "c", "new", "newer"})
    advance(progress, Event("a", ran=True), 0.0)
    assert seconds_left(progress, 0.0) == (60 + 120 + 600 + 2 * 120, 2)
    assert progress_line(progress, 0.0).endswith("about 17 min left (2 stages unmeasured)")


def test_plain_lines_when_not_on_a_terminal_and_a_redrawn_line_on_one():
    plain = io.BytesIO()
    display = Display(plain, on_terminal=False)
    display.progress("[stage 1/2] a — 0.0 min elapsed")
    display.passthrough(b"> python -m pipeline.stages.a\n")
    display.progress("[stage 2/2] b — 0.1 min elapsed")
    display.close("[done] 2/2 stages in 0.2 min (2 finished, 0 up to date)")
    assert plain.getvalue().decode().splitlines(keepends=True) == [
        "[stage 1/2] a — 0.0 min elapsed\n",
        "> python -m pipeline.stages.a\n",
        "[stage 2/2] b — 0.1 min elapsed\n",
        "[done] 2/2 stages in 0.2 min (2 finished, 0 up to date)\n",
    ]
    terminal = io.BytesIO()
    display = Display(terminal, on_terminal=True)
    display.progress("[stage 1/2] a")
    display.passthrough(b"> python -m pipeline.stages.a\n")
    assert terminal.getvalue() == b"\r\x1b[K[stage 1/2] a\r\x1b[K> python -m pipeline.stages.a\n[stage 1/2] a"


def fake_dvc(folder: Path, repro: str) -> dict[str, str]:
    """A ``dvc`` first on PATH that answers ``dag --dot`` with DOT, ``status --json`` with prepare changed, and
    runs ``repro``'s Python body; the environment to run the tool with."""
    script = folder / "bin" / "dvc"
    script.parent.mkdir()
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, signal, sys, time\n"
        f"if sys.argv[1] == 'dag':\n    print({DOT!r})\n"
        "elif sys.argv[1] == 'status':\n    print(json.dumps({'prepare': [{'changed deps': {'x': 'modified'}}]}))\n"
        "else:\n" + textwrap.indent(textwrap.dedent(repro), "    ")
    )
    script.chmod(0o755)
    run = {"machine": "a test machine", "item_seconds": {"prepare": 60.0}}
    run |= {"stage_seconds": {"sweep_cnn": 1200.0}, "stage_runs": {"sweep_cnn": 2}}
    times = {"runs": {"cpu fp32": run}}
    (folder / "metrics").mkdir()
    (folder / "metrics" / "repro_time.json").write_text(json.dumps(times))
    env = clean_env()
    env["PATH"] = f"{script.parent}{os.pathsep}{env['PATH']}"
    return env


def test_the_tool_runs_dvc_repro_passes_its_lines_through_and_exits_with_its_status(tmp_path):
    repro = """
        print("Stage 'download' didn't change, skipping")
        for stage in ("prepare", "sweep_cnn@0"):
            print(f"Running stage '{stage}':")
            print(f"> python -m pipeline.stages.{stage}")
        print("ERROR: failed to reproduce 'sweep_cnn@0'", file=sys.stderr)
        sys.exit(3)
    """
    env = fake_dvc(tmp_path, repro)
    result = subprocess.run([sys.executable, "-m", "pipeline.tools.progress", "--no-commit"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.returncode == 3, result.stderr
    lines = result.stdout.splitlines()
    assert "\r" not in result.stdout and "\x1b" not in result.stdout  # a pipe: plain lines only
    assert lines[0] == (
        "[plan] 6 stages, 4 to run: about 31 min by the times measured in cpu fp32 on a test machine, rescaled as "
        "stages finish (1 unmeasured)"
    )  # prepare's 60 s, 600 s for each sweep_cnn item (their stage's 1200 s shared), plot never timed: the median
    assert lines[1:-1:] == [
        "Stage 'download' didn't change, skipping",
        "Running stage 'prepare':",
        lines[3],
        "> python -m pipeline.stages.prepare",
        "Running stage 'sweep_cnn@0':",
        lines[6],
        "> python -m pipeline.stages.sweep_cnn@0",
        "ERROR: failed to reproduce 'sweep_cnn@0'",
    ]
    assert lines[3].startswith("[stage 2/6] prepare — 0.") and lines[3].endswith(
        " min elapsed, about 31 min left (1 stage unmeasured)"
    )
    assert lines[6].startswith("[stage 3/6] sweep_cnn@0 — 0.")
    assert lines[6].endswith(" min elapsed, under a minute left (0.00x the measured times, 1 stage unmeasured)")
    assert lines[-1].startswith("[stopped] dvc repro exited with status 3 after 0.")
    assert lines[-1].endswith(" min at stage 3/6 (1 finished, 1 up to date)")


def test_sigterm_reaches_dvc_and_the_tool_exits_with_its_status(tmp_path):
    repro = """
        def stop(signum, frame):
            print('fake dvc stopped by SIGTERM', flush=True)
            sys.exit(143)
        signal.signal(signal.SIGTERM, stop)
        print("Running stage 'prepare':", flush=True)
        time.sleep(60)
    """
    env = fake_dvc(tmp_path, repro)
    tool = subprocess.Popen([sys.executable, "-m", "pipeline.tools.progress"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        for line in tool.stdout:
            if line.startswith("[stage 1/6] prepare"):
                break
        else:
            pytest.fail("the tool printed no progress line for the running stage")
        tool.send_signal(signal.SIGTERM)
        rest = tool.stdout.read()
        assert tool.wait(timeout=30) == 143
    finally:
        tool.kill()
    assert rest.splitlines()[0] == "fake dvc stopped by SIGTERM"
    assert rest.splitlines()[-1].startswith("[stopped] dvc repro exited with status 143")


@pytest.mark.parametrize("args", [["-i"], ["--interactive", "train_scratch"]])
def test_interactive_repro_is_refused_in_one_line(args, tmp_path):
    env = fake_dvc(tmp_path, "sys.exit(0)")
    result = subprocess.run([sys.executable, "-m", "pipeline.tools.progress", *args], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.strip().startswith("error in stage progress: dvc repro -i asks for input")


def test_a_params_file_a_stage_would_refuse_stops_the_run_before_dvc_in_one_line(tmp_path):
    """DVC reads a key given twice as 'YAML file structure is corrupted'; the tool names the key and its line
    before dvc starts a stage."""
    env = fake_dvc(tmp_path, "print('fake dvc ran', flush=True)")
    text = (REPO / "params.yaml").read_text()
    (tmp_path / "params.yaml").write_text(text.replace("\nseeds:", "\nseeds: [7]\nseeds:", 1))
    result = subprocess.run([sys.executable, "-m", "pipeline.tools.progress"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.returncode == 1 and "fake dvc ran" not in result.stdout
    (line,) = result.stderr.strip().splitlines()
    assert "seeds is given twice" in line and "line " in line


def test_a_repro_time_file_left_with_merge_markers_stops_the_run_before_dvc_in_one_line_naming_it(tmp_path):
    """metrics/repro_time.json is committed and edited on two branches: a merge's markers are one line naming the
    file and how to mend it, not a JSONDecodeError."""
    env = fake_dvc(tmp_path, "print('fake dvc ran', flush=True)")
    (tmp_path / "metrics/repro_time.json").write_text('<<<<<<< HEAD\n{"a": 1}\n=======\n{"b": 2}\n>>>>>>> theirs\n')
    result = subprocess.run([sys.executable, "-m", "pipeline.tools.progress"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.returncode == 1 and "fake dvc ran" not in result.stdout
    (line,) = result.stderr.strip().splitlines()
    assert "metrics/repro_time.json has merge-conflict markers" in line and "git checkout --ours" in line
