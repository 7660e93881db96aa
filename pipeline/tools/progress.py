"""Where a whole ``dvc repro`` stands: ``make repro`` runs it (``python -m pipeline.tools.progress [ARGS]`` or
``vit-progress [ARGS]``; ARGS go to ``dvc repro`` as written).

Runs ``dvc repro``, passes every line of its output through unchanged, and at each stage DVC starts prints

    [stage 17/45] sweep_cnn@2 — 12.3 min elapsed, about 70 min left (1.21x the measured times)

The total is every stage this ``dvc repro`` considers, known before it starts: the graph from ``dvc dag --dot``,
narrowed by the targets and ``-s``/``-p``/``-P``/``--downstream`` as DVC narrows it. A stage counts once, when
DVC starts it or reports it up to date. The stages expected to run are those ``dvc status --json`` reports
changed and every stage after one of them (a stage's status compares only its own inputs with dvc.lock, and a
rerun rewrites the inputs of the stages after it). Not ``dvc repro --dry``: from scratch it stops at the first
stage whose inputs do not exist yet, and it never sees that a rerun upstream changes a stage's inputs.

The time left is the measured seconds of the stages still to run (metrics/repro_time.json: the committed
protocol's stages timed in parts on this CPU kind and precision where there are any, else the run timed in
this device and precision, else the first run there; per stage item where recorded; a stage never timed counts
as the median timed one, and the line says how many), times how this machine has gone so far: the wall time of
the stages finished here over their measured seconds, once those add up to a minute (before that 1.0, since the
start-up of one short stage would scale everything).

On a terminal the progress line stays last and is redrawn each second; elsewhere (CI, a pipe, a log file) each
is a plain full line. The stages' own tqdm bars are off, as they are in CI (their output is a pipe here). Exits
with dvc's status. Ctrl-C, SIGTERM and SIGHUP go to dvc and the stage it runs, as a terminal would deliver
them, once. ``-i`` is not supported (dvc gets no input here): run ``dvc repro -i`` itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from pipeline.core.entry import stage_main, tool_parser
from pipeline.core.errors import UserError
from pipeline.core.files import read_json
from pipeline.core.params_yaml import PARAMS_FILE, load_params
from pipeline.core.paths import METRICS
from pipeline.results.repro_plan import (
    Event,
    Plan,
    Selection,
    make_plan,
    measured_stage_seconds,
    measurements,
    parse_event,
    read_graph,
    read_selection,
)
from pipeline.train.runtime import resolve_runtime

TIMES = METRICS / "repro_time.json"  # the committed wall times of full runs, per device and precision

# Measured seconds the finished stages must reach before their wall time rescales the estimate.
MIN_MEASURED_S = 60.0
REDRAW_S = 1.0
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def dvc_output(dvc: str, *args: str) -> str:
    """The standard output of a quick ``dvc`` command that reads the pipeline and changes nothing.

    Raises:
        UserError: it failed; says how.
    """
    result = subprocess.run([dvc, *args], capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        lines = result.stderr.strip().splitlines() or ["no message"]
        why = next((line for line in lines if line.startswith("ERROR")), lines[-1])  # dvc's one-line summary
        raise UserError(f"dvc {' '.join(args)} exited with status {result.returncode}: {why}")
    return result.stdout


def read_plan(dvc: str, selection: Selection | None) -> tuple[Plan | None, str]:
    """The plan from ``dvc dag --dot`` and ``dvc status --json``, or None and why not."""
    if selection is None:
        return None, "the arguments do not parse as dvc repro's"
    try:
        graph = read_graph(dvc_output(dvc, "dag", "--dot"))
        changed = set(json.loads(dvc_output(dvc, "status", "--json") or "{}"))
    except (UserError, ValueError, subprocess.TimeoutExpired) as error:
        return None, str(error)
    plan = make_plan(graph, changed, selection)
    return plan, "" if plan else "-R, --glob or a target that names no stage of dvc dag"


@dataclass
class Progress:
    """Where the run stands: what is done, what runs now, and how fast this machine has gone against the
    measurements."""

    plan: Plan | None
    measured: dict[str, float]  # measured seconds per stage of the plan that was timed
    started: float  # time.monotonic() at the tool's start
    done: set[str] = field(default_factory=set)
    finished_runs: int = 0  # stages whose command ran to its end
    current: str | None = None
    current_since: float = 0.0
    finished_wall_s: float = 0.0  # wall seconds of the finished stages that ran and were timed
    finished_measured_s: float = 0.0  # their measured seconds

    @property
    def median_s(self) -> float | None:
        """What a stage never timed counts as."""
        return statistics.median(self.measured.values()) if self.measured else None


def new_progress(plan: Plan | None, run: dict, started: float) -> Progress:
    """The state before dvc reports any stage: the run's measured seconds of the plan's stages."""
    stages = plan.stages if plan else frozenset()
    timed = {stage: measured_stage_seconds(run, stage) for stage in stages}
    return Progress(plan, {stage: s for stage, s in timed.items() if s is not None}, started)


def finish_current(progress: Progress, now: float) -> None:
    """The stage that ran until now is done; its wall time counts towards the speed ratio if it was timed."""
    if progress.current is None:
        return
    progress.done.add(progress.current)
    progress.finished_runs += 1
    if progress.current in progress.measured:
        progress.finished_wall_s += now - progress.current_since
        progress.finished_measured_s += progress.measured[progress.current]
    progress.current = None


def advance(progress: Progress, event: Event, now: float) -> None:
    """DVC reached ``event.stage``: the stage before it is done, and this one runs now or is done at once."""
    finish_current(progress, now)
    if event.ran:
        progress.current, progress.current_since = event.stage, now
    else:
        progress.done.add(event.stage)


def speed_ratio(progress: Progress) -> float:
    """Wall time over measured time of the finished stages, once enough was measured; else 1.0 (this machine
    as fast as the measured one)."""
    if progress.finished_measured_s < MIN_MEASURED_S:
        return 1.0
    return progress.finished_wall_s / progress.finished_measured_s


def seconds_left(progress: Progress, now: float) -> tuple[float, int] | None:
    """The estimated seconds until the last expected stage is done, and how many of the stages still counted
    were never timed; None without a plan or any measurement."""
    median = progress.median_s
    if progress.plan is None or median is None:
        return None
    ratio = speed_ratio(progress)
    to_come = [stage for stage in progress.plan.to_run if stage not in progress.done and stage != progress.current]
    left = ratio * sum(progress.measured.get(stage, median) for stage in to_come)
    counted = to_come
    if progress.current is not None:
        current_s = ratio * progress.measured.get(progress.current, median)
        left += max(0.0, current_s - (now - progress.current_since))
        counted = [*to_come, progress.current]
    return left, sum(1 for stage in counted if stage not in progress.measured)


def stage_number(progress: Progress) -> str:
    """``17/45``: the stage running now (or the last one done) out of the plan's; no total without a plan."""
    number = len(progress.done) + (progress.current is not None)
    if progress.plan is None:
        return str(number)
    total = len(progress.plan.stages | progress.done | ({progress.current} if progress.current else set()))
    return f"{number}/{total}"


def progress_line(progress: Progress, now: float) -> str:
    """``[stage 17/45] sweep_cnn@2 — 12.3 min elapsed, about 70 min left (1.21x the measured times)``."""
    where = progress.current or "between stages"
    line = f"[stage {stage_number(progress)}] {where} — {(now - progress.started) / 60:.1f} min elapsed"
    left = seconds_left(progress, now)
    if left is None:
        return line
    seconds, unmeasured = left
    line += f", about {seconds / 60:.0f} min left" if seconds >= 60 else ", under a minute left"
    notes = []
    if progress.finished_measured_s >= MIN_MEASURED_S:
        notes.append(f"{speed_ratio(progress):.2f}x the measured times")
    if unmeasured:
        notes.append(f"{unmeasured} stage{'s' if unmeasured > 1 else ''} unmeasured")
    return line + (f" ({', '.join(notes)})" if notes else "")


def plan_line(progress: Progress, source: str, why_not: str) -> str:
    """The line before dvc starts: how many stages, how many expected to run, by which measurements."""
    if progress.plan is None:
        return f"[plan] stage numbers only: {why_not}"
    left = seconds_left(progress, progress.started)
    estimate = f"about {left[0] / 60:.0f} min by {source}, rescaled as stages finish" if left else source
    unmeasured = f" ({left[1]} unmeasured)" if left and left[1] else ""
    total = len(progress.plan.stages)
    return f"[plan] {total} stage{'s' * (total != 1)}, {len(progress.plan.to_run)} to run: {estimate}{unmeasured}"


def end_line(progress: Progress, status: int, now: float) -> str:
    """The last line: how many stages ran and were up to date, and how dvc ended."""
    minutes = (now - progress.started) / 60
    counts = f"{progress.finished_runs} finished, {len(progress.done) - progress.finished_runs} up to date"
    if status == 0:
        return f"[done] {stage_number(progress)} stages in {minutes:.1f} min ({counts})"
    where = f"stage {stage_number(progress)}"
    return f"[stopped] dvc repro exited with status {status} after {minutes:.1f} min at {where} ({counts})"


class Display:
    """Where lines go. On a terminal the progress line stays last, cleared and redrawn around dvc's lines;
    elsewhere every line is written whole, once."""

    CLEAR = b"\r\x1b[K"

    def __init__(self, stream: BinaryIO, on_terminal: bool, encoding: str = "utf-8"):
        self.stream, self.on_terminal, self.encoding = stream, on_terminal, encoding
        self.status = b""

    def _encoded(self, text: str) -> bytes:
        return text.encode(self.encoding, errors="replace")

    def passthrough(self, raw: bytes) -> None:
        """One line of dvc's output, as it came."""
        if self.on_terminal and self.status:
            self.stream.write(self.CLEAR + raw + self.status)
        else:
            self.stream.write(raw)
        self.stream.flush()

    def progress(self, text: str) -> None:
        """A new progress line: a full line, or on a terminal the status line redrawn (cut to its width, since a
        wrapped line cannot be redrawn in place)."""
        if not self.on_terminal:
            self.stream.write(self._encoded(text) + b"\n")
        else:
            self.status = self._encoded(text[: shutil.get_terminal_size().columns - 1])
            self.stream.write(self.CLEAR + self.status)
        self.stream.flush()

    def line(self, text: str) -> None:
        """A line of this tool's that stays (the plan, the end), above the status line on a terminal."""
        if self.on_terminal and self.status:
            self.stream.write(self.CLEAR + self._encoded(text) + b"\n" + self.status)
        else:
            self.stream.write(self._encoded(text) + b"\n")
        self.stream.flush()

    def close(self, text: str) -> None:
        """The last line, whole, in place of the status line."""
        self.status = b""
        self.stream.write((self.CLEAR if self.on_terminal else b"") + self._encoded(text) + b"\n")
        self.stream.flush()


def _pump(stream: BinaryIO, lines: queue.Queue) -> None:
    """Every line of ``stream`` into ``lines``, then None at its end."""
    for raw in iter(stream.readline, b""):
        lines.put(raw)
    lines.put(None)


@contextlib.contextmanager
def signals_forwarded_to(group: int):
    """SIGINT, SIGTERM and SIGHUP reach process group ``group`` (dvc, its shell and the stage: what a terminal's
    Ctrl-C reaches) instead of stopping this process; the former handlers come back after."""

    def forward(signum, frame) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signum)

    former = {signum: signal.signal(signum, forward) for signum in FORWARDED_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in former.items():
            signal.signal(signum, handler)


def run_repro(command: list[str], progress: Progress, display: Display) -> int:
    """Runs ``command`` (``dvc repro ...``), passing its output through and updating ``progress``; returns its exit
    status (128 + the signal's number where a signal ended it, as a shell reports it)."""
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True,  # its own process group: each signal reaches it once
                             env={**os.environ, "PYTHONUNBUFFERED": "1"})  # fmt: skip
    lines: queue.Queue = queue.Queue()
    with signals_forwarded_to(child.pid):
        threading.Thread(target=_pump, args=(child.stdout, lines), daemon=True).start()
        while True:
            try:
                raw = lines.get(timeout=REDRAW_S)
            except queue.Empty:
                if display.on_terminal:
                    display.progress(progress_line(progress, time.monotonic()))
                continue
            if raw is None:
                break
            display.passthrough(raw)
            if event := parse_event(raw.decode(errors="replace")):
                advance(progress, event, time.monotonic())
                if event.ran or display.on_terminal:
                    display.progress(progress_line(progress, time.monotonic()))
        status = child.wait()
    if status == 0:  # a failed stage is not done
        finish_current(progress, time.monotonic())
    return status if status >= 0 else 128 - status


def find_dvc() -> str:
    """``dvc`` on PATH, else the one beside this interpreter (``vit-progress`` from an inactive virtualenv)."""
    beside = Path(sys.executable).with_name("dvc")
    found = shutil.which("dvc") or (str(beside) if beside.is_file() else None)
    if found is None:
        raise UserError("dvc not found; run `make install`, or put .venv/bin on PATH")
    return found


def runtime_here() -> tuple[str | None, str]:
    """This setting's key in repro_time.json (``cpu bf16``) and the hardware string naming this CPU kind,
    resolved from params.yaml as the stages (and ``vit-estimate``) resolve them; no key where params.yaml does
    not resolve."""
    try:
        runtime = resolve_runtime(load_params().runtime)
    except (UserError, OSError):
        return None, ""
    return f"{runtime.device.type} {runtime.precision}", runtime.hardware


def parse_args(argv: list[str]) -> list[str]:
    """Only ``--help`` is this tool's: every other argument goes to ``dvc repro`` as written."""
    parser = tool_parser("pipeline.tools.progress", __doc__)
    parser.add_argument("dvc_args", nargs="*", metavar="ARG", help="an argument of dvc repro (its options too)")
    parser.parse_known_args(argv)
    return list(argv)


@stage_main
def main() -> None:
    dvc_args = parse_args(sys.argv[1:])
    started = time.monotonic()
    selection = read_selection(dvc_args)
    if selection is not None and selection.interactive:
        raise UserError("dvc repro -i asks for input, which this tool does not pass on: run dvc repro -i itself")
    if PARAMS_FILE.is_file():  # DVC's own reading of a key given twice says only "structure is corrupted"
        load_params()
    times = read_json(TIMES) if TIMES.is_file() else {}  # committed: may hold a merge's markers
    dvc = find_dvc()
    plan, why_not = read_plan(dvc, selection)
    run, source = measurements(times, *runtime_here())
    progress = new_progress(plan, run, started)
    display = Display(sys.stdout.buffer, sys.stdout.isatty(), sys.stdout.encoding or "utf-8")
    display.line(plan_line(progress, source, why_not))
    status = run_repro([dvc, "repro", *dvc_args], progress, display)
    display.close(end_line(progress, status, time.monotonic()))
    raise SystemExit(status)


if __name__ == "__main__":
    main()
