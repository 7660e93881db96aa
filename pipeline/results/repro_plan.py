"""What a ``dvc repro`` will do, read from DVC's own output: the stage graph of ``dvc dag --dot``, the stages a
command line selects (its targets and ``-s``/``-p``/``-P``/``--downstream``), the stages expected to run, DVC's
line for a stage started or up to date, and a stage's measured seconds in ``metrics/repro_time.json``. No
subprocess here: ``pipeline.tools.progress`` runs dvc and feeds these functions."""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass

RUNNING = re.compile(r"^Running stage '(?P<stage>.+)':$")
UP_TO_DATE = re.compile(r"^(?:Stage )?'(?P<stage>.+)' (?:didn't change, skipping|is cached - skipping run, .*)$")
DOT_EDGE = re.compile(r'^"(?P<upstream>.+)" -> "(?P<downstream>.+)";$')
DOT_NODE = re.compile(r'^"(?P<stage>.+)";$')


@dataclass(frozen=True)
class Event:
    """A stage DVC reached: it runs the stage's command (``ran``) or finds it up to date."""

    stage: str
    ran: bool


def parse_event(line: str) -> Event | None:
    """The stage a line of ``dvc repro``'s output starts or skips; None for any other line."""
    text = line.rstrip("\r\n")
    if match := RUNNING.match(text):
        return Event(match["stage"], ran=True)
    if match := UP_TO_DATE.match(text):
        return Event(match["stage"], ran=False)
    return None


def read_graph(dot: str) -> dict[str, set[str]]:
    """``dvc dag --dot``'s graph as each stage's set of the stages right after it (edges point downstream)."""
    graph: dict[str, set[str]] = {}
    for line in dot.splitlines():
        if edge := DOT_EDGE.match(line.strip()):
            graph.setdefault(edge["upstream"], set()).add(edge["downstream"])
            graph.setdefault(edge["downstream"], set())
        elif node := DOT_NODE.match(line.strip()):
            graph.setdefault(node["stage"], set())
    return graph


def reachable(graph: dict[str, set[str]], start: set[str]) -> set[str]:
    """``start`` and every stage its edges lead to."""
    seen, todo = set(start), list(start)
    while todo:
        for after in graph.get(todo.pop(), ()):
            if after not in seen:
                seen.add(after)
                todo.append(after)
    return seen


def reversed_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Each stage's set of the stages right before it."""
    before: dict[str, set[str]] = {stage: set() for stage in graph}
    for stage, afters in graph.items():
        for after in afters:
            before[after].add(stage)
    return before


@dataclass(frozen=True)
class Selection:
    """The ``dvc repro`` options that choose its stages."""

    targets: tuple[str, ...] = ()
    single_item: bool = False
    pipeline: bool = False
    all_pipelines: bool = False
    downstream: bool = False
    force: bool = False
    interactive: bool = False
    unmodelled: bool = False  # -R or --glob: targets this tool does not resolve as DVC does


def read_selection(dvc_args: list[str]) -> Selection | None:
    """The stage choice in ``dvc repro`` arguments; None where they do not parse as ``dvc repro``'s."""
    parser = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    parser.add_argument("targets", nargs="*")
    flags = {"-s": "single_item", "-p": "pipeline", "-P": "all_pipelines", "-f": "force", "-i": "interactive"}
    for short, name in flags.items():
        parser.add_argument(short, f"--{name.replace('_', '-')}", dest=name, action="store_true")
    for other in ("-q", "-v", "-k", "-R", "--downstream", "--glob"):
        parser.add_argument(other, action="store_true")
    try:
        known, _ = parser.parse_known_args(dvc_args)
    except argparse.ArgumentError:
        return None
    return Selection(targets=tuple(known.targets), downstream=known.downstream, unmodelled=known.R or known.glob,
                     **{name: getattr(known, name) for name in flags.values()})  # fmt: skip


def selected_stages(graph: dict[str, set[str]], selection: Selection) -> frozenset[str] | None:
    """The stages ``dvc repro`` goes through for these options: the targets (a foreach name stands for its items,
    no target for every stage of ./dvc.yaml) with the stages before them, after them (``--downstream``), their
    whole pipeline (``-p``) or alone (``-s``); every stage for ``-P``. None where a target names no stage here."""
    if selection.all_pipelines:
        return frozenset(graph)
    if selection.unmodelled:
        return None
    chosen: set[str] = set()
    for target in selection.targets or ("dvc.yaml",):
        name = target.removeprefix("./")
        if name == "dvc.yaml":
            matches = {stage for stage in graph if ":" not in stage}
        else:
            name = name.removeprefix("dvc.yaml:")
            matches = {stage for stage in graph if stage == name or stage.startswith(f"{name}@")}
        if not matches:
            return None
        chosen |= matches
    if selection.single_item:
        return frozenset(chosen)
    if selection.downstream:
        return frozenset(reachable(graph, chosen))
    before = reversed_graph(graph)
    if selection.pipeline:
        both_ways = {stage: graph[stage] | before[stage] for stage in graph}
        return frozenset(reachable(both_ways, chosen))
    return frozenset(reachable(before, chosen))


@dataclass(frozen=True)
class Plan:
    """What this ``dvc repro`` goes through, known before it starts."""

    stages: frozenset[str]  # every stage it considers
    to_run: frozenset[str]  # those expected to run: changed, or after a changed one


def make_plan(graph: dict[str, set[str]], changed: set[str], selection: Selection) -> Plan | None:
    """The plan from the graph and the stages ``dvc status`` reports changed; None where the selection is not
    resolved here."""
    stages = selected_stages(graph, selection)
    if stages is None:
        return None
    to_run = stages if selection.force else stages & reachable(graph, changed & set(graph))
    return Plan(stages=stages, to_run=frozenset(to_run))


def measured_stage_seconds(run: dict, stage: str) -> float | None:
    """The measured seconds of one stage item (``sweep_cnn@2``) in a run of ``repro_time.json``: its own time where
    the run recorded items (``item_seconds``), else its stage's time shared evenly by the stage's items
    (``stage_seconds`` over ``stage_runs``); None for a stage the run never timed. A stage of another folder's
    dvc.yaml (``sub/dvc.yaml:name``) is looked up by its name."""
    name = stage.rsplit(":", 1)[-1]
    if name in run.get("item_seconds", {}):
        return float(run["item_seconds"][name])
    base = name.split("@", 1)[0]
    if base in run.get("stage_seconds", {}):
        return float(run["stage_seconds"][base]) / run.get("stage_runs", {}).get(base, 1)
    return None


# What tells CPU kinds apart in a runtime's hardware string: the vector ISA and the native bf16 features.
CPU_KIND_MARKS = ("AVX2", "AVX512", "avx512_bf16", "amx_bf16")


def cpu_kind(hardware: str) -> set[str]:
    """The marks of ``CPU_KIND_MARKS`` that a hardware string (``Runtime.hardware``) names."""
    words = set(re.findall(r"[A-Za-z0-9_]+", hardware))
    return {mark for mark in CPU_KIND_MARKS if mark in words}


def committed_parts(times: dict, runtime_key: str | None, hardware: str) -> tuple[dict[str, float], list[str]]:
    """The committed protocol's stage items as timed in parts on this CPU kind and precision, where no full run of
    it was: ``repro_time.json``'s ``committed_parts`` names the partial runs that ran its stages as they are now,
    newest first, and each stage item takes its seconds, less that run's pauses, from the first of them that ran
    on this CPU kind in this precision and timed it. Returns those seconds and the partial runs they came from
    (both empty where none ran here: a part timed on another kind says nothing about this one)."""
    if runtime_key is None or not runtime_key.startswith("cpu "):
        return {}, []
    precision = runtime_key.split(" ", 1)[1]
    here = [
        run
        for run in times.get("partial_runs", [])
        if run.get("hardware") and cpu_kind(run["hardware"]) == cpu_kind(hardware)
        and run.get("precision", "").split(" ", 1)[0] == precision
    ]  # fmt: skip
    seconds: dict[str, float] = {}
    used: list[str] = []
    for purpose in times.get("committed_parts", []):
        for run in (run for run in here if run.get("purpose") == purpose):
            new = {stage: s for stage, s in run.get("stage_seconds", {}).items() if stage not in seconds}
            paused = run.get("paused_seconds", {})
            seconds.update({stage: s - paused.get(stage, 0) for stage, s in new.items()})
            used += [purpose] if new and purpose not in used else []
    return seconds, used


def measurements(times: dict, runtime_key: str | None, hardware: str = "") -> tuple[dict, str]:
    """The run of ``repro_time.json`` to scale: the committed protocol's parts timed on this CPU kind in this
    precision (``committed_parts``) where there are any, else the full run in this device and precision, else the
    first timed; and a few words saying which. An empty run where nothing was timed. A stage the parts never
    timed here keeps the full run's time (the pixel probe's seconds, not the median stage's minutes)."""
    runs = times.get("runs", {})
    key = runtime_key if runtime_key in runs else next(iter(runs), None)
    parts, used = committed_parts(times, runtime_key, hardware)
    if parts:
        full = runs[key] if key is not None else {}
        run = {**full, "item_seconds": {**full.get("item_seconds", {}), **parts}}
        return run, f"the committed protocol's stages as timed in parts here ({', '.join(used)})"
    if key is None:
        return {}, "no measured times"
    return runs[key], f"the times measured in {key} on {runs[key].get('machine', 'an unnamed machine')}"
