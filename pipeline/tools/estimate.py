"""How long a full ``dvc repro`` of the committed params should take here: printed by ``make repro``
(``python -m pipeline.tools.estimate`` or ``vit-estimate``).

Resolves the runtime exactly as the stages will (device, the precision ``auto`` picks, the CPU kind)
and looks it up in ``metrics/repro_time.json``, the committed wall times of full runs per device and precision.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import yaml

from pipeline.core.entry import stage_main, tool_parser
from pipeline.core.files import read_json
from pipeline.core.params_yaml import load_params
from pipeline.results.repro_plan import committed_parts, cpu_kind
from pipeline.train.runtime import resolve_runtime

TIMES = Path("metrics/repro_time.json")
DVC_YAML = Path("dvc.yaml")


def estimate_line(runtime_key: str, hardware: str, times: dict, stages: Iterable[str] = ()) -> str:
    """One line: the measured time of a full run on this device and precision, or the settings that were timed;
    and a second where that run's protocol is older than the committed one (``protocol`` in the times file).
    Only measurements: a setting never timed says so, and a run timed on another CPU kind says that too (a
    2-core AVX2 machine and one with avx512_bf16 differ by far more than the noise). Where the committed
    protocol's stages were timed in parts on this CPU kind and precision (``committed_parts``), their sum, with the
    stages they never timed here named and their time in the full run added, on that run's machine; ``stages``
    (dvc.yaml's stage names) adds those that neither the parts nor the full run timed, named as not counted."""
    here = f"{runtime_key} ({hardware})"
    parts, used = committed_parts(times, runtime_key, hardware)
    measured = times.get("runs", {}).get(runtime_key)
    if parts:
        line = (
            f"dvc repro from scratch runs in {here}: about {sum(parts.values()) / 60:.0f} min, the committed "
            f"protocol's stages as timed in parts on this CPU kind ({len(parts)} stage items, partial_runs "
            f"{', '.join(used)} in {TIMES}"
        )
        if untimed := untimed_stages(parts, measured or {}):
            line += (
                f"), plus the {len(untimed)} stages never timed here ({', '.join(sorted(untimed))}): about "
                f"{sum(untimed.values()) / 60:.0f} min in the full run on {measured['machine']}"
            )
        else:
            line += "; a stage not among them was never timed here)"
        if partly := partly_timed(parts, measured or {}):
            line += f"; not counted: the items never timed here of {', '.join(partly)}"
        if unknown := never_timed(stages, parts, measured or {}):
            line += f"; not counted: {', '.join(unknown)}, timed neither here nor in that full run"
        return f"{line}; stages already up to date are skipped"
    if measured is None:
        known = ", ".join(f"{key}: {value['minutes']:.0f} min" for key, value in times.get("runs", {}).items())
        return f"dvc repro from scratch runs in {here}; no full run was timed in that setting ({known})"
    protocol = f" under {measured['protocol']}" if measured.get("protocol") else ""
    other_kind = ""
    timed_on = measured.get("hardware", "")
    if runtime_key.startswith("cpu") and timed_on and cpu_kind(timed_on) != cpu_kind(hardware):
        before = same_kind_before(runtime_key, hardware, times)
        other_kind = f" (another CPU kind: {timed_on}; this one's time will differ{before})"
    line = (
        f"dvc repro from scratch runs in {here}: about {measured['minutes']:.0f} min, measured on "
        f"{measured['machine']}{other_kind}{protocol}; stages already up to date are skipped"
    )
    committed = times.get("protocol")  # the committed params' protocol, where it is newer than every full run
    if committed and measured.get("protocol") and measured["protocol"] != committed:
        name = committed.split(" (")[0]
        line += (f"\nexpect longer: the committed protocol ({name}) trains more runs than "
                 f"{measured['protocol'].split(' (')[0]} "
                 f"and has no full run timed yet; its parts' times are partial_runs in {TIMES}")  # fmt: skip
    return line


def stage_of_items(items: Iterable[str]) -> list[str]:
    """Each stage item's stage (``sweep_cnn@2`` -> ``sweep_cnn``), in order, repeats kept."""
    return [item.partition("@")[0] for item in items]


def untimed_stages(parts: dict[str, float], full: dict) -> dict[str, float]:
    """The full run's stages (``stage_seconds``, by stage name) of which no item was timed in ``parts`` (by item:
    ``sweep_cnn@2``), with the full run's seconds: what the parts' sum leaves out."""
    timed = set(stage_of_items(parts))
    return {stage: seconds for stage, seconds in full.get("stage_seconds", {}).items() if stage not in timed}


def partly_timed(parts: dict[str, float], full: dict) -> list[str]:
    """The full run's foreach stages (``stage_runs``: how many items it ran) of which the parts timed some items
    but fewer than that, as "sweep_scratch (4 of 5 items)": their sum leaves the rest out, unnamed otherwise."""
    counts = Counter(stage_of_items(parts))
    runs = full.get("stage_runs", {})
    return [f"{stage} ({n} of {runs[stage]} items)" for stage, n in sorted(counts.items()) if n < runs.get(stage, 0)]


def never_timed(stages: Iterable[str], parts: dict[str, float], full: dict) -> list[str]:
    """The stages of ``stages`` (dvc.yaml's names) that neither ``parts`` (by item) nor the full run timed: stages
    newer than that run (``collapse``), which the sum would otherwise leave out without a word."""
    timed = set(stage_of_items(parts)) | set(full.get("stage_seconds", {}))
    return sorted(set(stages) - timed)


def dvc_stage_names(path: Path = DVC_YAML) -> list[str]:
    """The stage names in ``dvc.yaml`` (foreach and matrix stages once, by their name): none where it is absent."""
    if not path.is_file():
        return []
    return list((yaml.safe_load(path.read_text()) or {}).get("stages", {}))


def same_kind_before(runtime_key: str, hardware: str, times: dict) -> str:
    """Where the current protocol was timed on another CPU kind only: the newest earlier full run in this setting
    on this CPU kind, as a clause (an AVX2 machine runs fp32 about three times slower than a Sapphire Rapids)."""
    for run in reversed(times.get("earlier", [])):
        if run.get("runtime") == runtime_key and cpu_kind(run.get("hardware", "")) == cpu_kind(hardware):
            protocol = f" ({run['protocol']})" if run.get("protocol") else ""
            return f"; on this kind an earlier protocol{protocol} took about {run['minutes']:.0f} min"
    return ""


def parse_args(argv: list[str]) -> argparse.Namespace:
    """No options: ``--help`` prints this module's docstring."""
    parser = tool_parser("pipeline.tools.estimate", __doc__)
    return parser.parse_args(argv)


@stage_main
def main() -> None:
    parse_args(sys.argv[1:])
    runtime = resolve_runtime(load_params().runtime)
    times = read_json(TIMES) if TIMES.is_file() else {}  # committed: may hold a merge's markers
    key = f"{runtime.device.type} {runtime.precision}"
    print(estimate_line(key, runtime.hardware, times, dvc_stage_names()))


if __name__ == "__main__":
    main()
