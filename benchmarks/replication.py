"""Issue 37's replication with fresh seeds (the curve and the headline again, new subsets and new backbones), and
its full rerun of the committed pipeline, each across as many working sessions as it takes.

    python benchmarks/replication.py --work ../replication     # hours: every trained arm of the curve again
    python benchmarks/precision_change.py metrics/replication > metrics/replication/comparison.json
    # the loss rule's run's replication: metrics/run_before_accuracy_rule/replication/, held against that run
    python benchmarks/replication.py --rerun --work ../rerun   # hours: every stage of this commit's dvc.yaml
    python benchmarks/replication.py --work ../replication --only backbone ... evaluate   # see ONLY below
    python benchmarks/replication.py --adopted --work ../rerun_compute   # hours: --rerun with ADOPTED_CHANGES
    python benchmarks/replication.py --cross-kind --work ../rerun_cpu   # the sweeps another CPU kind ran, here
    python benchmarks/precision_change.py metrics/rerun_cpu/progress/metrics/data_hunger \
        > metrics/rerun_cpu/comparison.json

With ``--rerun`` nothing in ``params.yaml`` changes, every stage runs (one ``dvc repro`` a stage, in ``RERUN_ORDER``:
the stages that read the prepared data alone first, cheapest first, so that what a session finishes survives it;
then those that read the cached backbones, which a new session trains again), progress goes to
``metrics/rerun/progress/`` and, once every stage is done, its files replace this checkout's ``dvc.lock``,
``metrics/`` and ``plots/`` files (``--collect-only`` does that alone). Each ``dvc repro`` call's wall time, the
CPU and its bf16 features go to ``times.json`` beside the progress folder, for ``metrics/repro_time.json``.
``--adopted`` is that rerun with ``ADOPTED_CHANGES`` set in the worktree's ``params.yaml`` (the changes
docs/results.md adopted for the next full run before it began), its progress in ``metrics/rerun_compute/progress/``;
once it is done, collecting it first keeps the committed run's result files in ``metrics/run_before_compute_rule/``
(``keep_committed``), then the same values are set in this checkout's ``params.yaml`` by hand. (The accuracy rule's
run was the adopted run before: its progress is in ``metrics/rerun_adopted/progress/``, the run it replaced in
``metrics/run_before_accuracy_rule/``.)

Makes ``--work`` a git worktree of this commit (or reuses one an interrupted run left there: DVC resumes at the
first stage whose outputs are missing), shares this repository's DVC cache, sets the seeds docs/results.md wrote
before the run (``seeds: [5, 6, 7, 8, 9]``, ``masked_patch.seed: 5``, ``masked_patch.extra_seeds: [6, 7]``:
every other value is this commit's) and runs ``dvc repro`` of the stages the comparison reads (``data_hunger``,
``evaluate``, and everything before them), one at a time in the rerun's order. Then it copies the replication's
point files, ``data_hunger.json``, ``comparisons.json`` and ``evaluate.json`` into ``metrics/replication/``, with
a note of the commit, the seeds and the machine. The comparison (``benchmarks/precision_change.py``) holds each
verdict against the committed run's and pools the ten seeds.

The run takes longer than one working session on 2 cores, and a worktree need not outlive its session. So after
each ``dvc repro`` call and whenever one stops (finished, failed or interrupted), the worktree's ``dvc.lock`` and the
files its finished stages wrote to git-tracked folders (``metrics/``, ``plots/``) are saved to
``metrics/replication/progress/`` (``metrics/rerun/progress/``), to be committed; a new worktree starts from them,
and ``dvc repro`` reruns only what they do not hold (the models, kept in the DVC cache alone, are retrained:
byte-equal on the same CPU kind and precision, so the stages after them stay done; on another, those stages run
again). With ``--cross-kind`` nothing in ``params.yaml`` changes either: the curve's sweeps whose committed point
files ran on another CPU kind or in another precision than this machine's (``other_kind_sweeps``) run again here,
forced (``dvc repro --force --single-item``: the committed ``dvc.lock`` holds them as done), cheapest first, the
progress in ``metrics/rerun_cpu/progress/``: the same seeds, subsets and code on another machine, so whether issue
37's choices (learning rates on three seeds, 1,500 validation images) survive the last bits a CPU kind moves.
A worktree left at an older commit is reused only where that commit's pipeline (``pipeline/``,
``dvc.yaml``, ``params.yaml``) is this one's."""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

import yaml

REPO = Path(__file__).resolve().parents[1]
SEEDS = {"seeds": [5, 6, 7, 8, 9], "masked_patch": {"seed": 5, "extra_seeds": [6, 7]}}
TARGETS = ("data_hunger", "evaluate")
COPIED = ("data_hunger.json", "comparisons.json", "evaluate.json")
PROGRESS = REPO / "metrics" / "replication" / "progress"
# The rerun's order: the stages whose deps are the prepared data alone (no cached model), which stay done however
# the next session's CPU trains a backbone, cheapest first; then those that read the backbones; then the rest.
RERUN_ORDER = (
    "prepare", *(f"sweep_pixels@{point}" for point in range(5)),
    "sweep_scratch@0", "sweep_cnn@0", "sweep_scratch@1", "sweep_cnn@1", "sweep_cnn@2",
    "sweep_scratch@2", "ablation", "masked_patch_pool", "collapse", "sweep_cnn@3", "sweep_scratch@3",
    "masked_patch_long", "sweep_cnn@4", "sweep_scratch@4",
    "backbone", "masked_patch", "masked_patch_seeds", "train_scratch", "linear_probe", "analysis",
    *(f"pretrain_scale@{arch}-{point}" for arch in ("vit", "resnet") for point in range(4)),
    "sweep_pretrained@0", "sweep_pretrained@1", "sweep_pretrained@2", "sweep_pretrained@3", "sweep_pretrained@4",
)  # fmt: skip


class Run(NamedTuple):
    """What one kind of run changes in ``params.yaml``, which ``dvc repro`` targets it runs in turn (the last with
    everything they need: ``None`` is the whole pipeline) and where its progress is kept."""

    changes: dict
    targets: tuple
    progress: Path
    force: bool = False  # rerun stages that dvc.lock holds as done (a rerun of the same code and params)


# The replication's: the rerun's order less the stages that neither data_hunger nor evaluate reads.
NOT_COMPARED = ("ablation", "masked_patch_pool", "collapse", "masked_patch_long", "analysis", "pretrain_scale")
REPLICATION = Run(SEEDS, (*(t for t in RERUN_ORDER if t.split("@")[0] not in NOT_COMPARED), *TARGETS), PROGRESS)
RERUN = Run({}, (*RERUN_ORDER, None), REPO / "metrics" / "rerun" / "progress")
# The next full run (docs/results.md, "Issue 37's bound on compute", written before it began): successive halving
# of the choice seeds and a monitor for the plateau rule, nothing else. (The run before, the accuracy rule's, set
# {"data_hunger": {"plateau_score": "accuracy"}}; its progress is kept in metrics/rerun_adopted/progress/.)
ADOPTED_CHANGES = {"data_hunger": {"choice_keep": 2, "monitor_per_class": 100}}
ADOPTED = Run(ADOPTED_CHANGES, (*RERUN_ORDER, None), REPO / "metrics" / "rerun_compute" / "progress")
# What the adopted run's collection keeps of the run it replaces, for precision_change.py to hold it against
RUN_BEFORE_ADOPTED = REPO / "metrics" / "run_before_compute_rule"
KEPT_BEFORE = ("ablation.json", "collapse.json", "comparisons.json", "data_hunger.json", "evaluate.json",
               "pretraining_scale.json", "data_hunger")  # fmt: skip
# the committed run's; the loss rule's run's check is kept in metrics/run_before_accuracy_rule/rerun_cpu/
CROSS_KIND_PROGRESS = REPO / "metrics" / "rerun_cpu" / "progress"
COMMITTED_POINTS = REPO / "metrics" / "data_hunger"
SWEPT = ("scratch", "cnn", "pretrained")  # the sweeps whose arms choose a learning rate (pretrained: finetune's)
SAVED = ("dvc.lock", "metrics", "plots")  # what a stopped run leaves that git can keep
PIPELINE = ("pipeline", "dvc.yaml", "params.yaml")  # a worktree of another commit is reused only if these agree
# ONLY (--only): git keeps no model, and a new machine has no DVC cache, so a `dvc repro` there trains every
# backbone again (byte-equal only on the same CPU kind and precision) and, where one differs, every stage that
# reads it. So the stages that read a backbone run in one session, by --only, each alone (--single-item: no
# upstream stage is looked at); data_hunger reads point files alone and may run in a later session, but evaluate
# reads the backbones and data_hunger.json, so it runs in the session that holds both. --single-item trusts the
# order given, so data_hunger and evaluate refuse to run while a stage they read has another run's seeds.


def run_kind(runtime: str) -> str:
    """A point file's ``runtime`` line less the bf16 step probe's ratio, which varies between runs on one CPU kind:
    ``cpu bf16 (AVX512, native bf16: avx512_bf16 (step 1.73x))`` -> ``cpu bf16 (AVX512, native bf16: avx512_bf16)``."""
    return re.sub(r" \(step [0-9.]+x\)", "", runtime)


def point_file(target: str) -> str:
    """The point file a sweep target writes: ``sweep_cnn@2`` -> ``cnn_2.json`` (``sweep_pretrained``: fine-tuning's,
    the trained arm of the transfer sweep)."""
    arm, _, point = target.removeprefix("sweep_").partition("@")
    return f"{'finetune' if arm == 'pretrained' else arm}_{point}.json"


def other_kind_sweeps(this_runtime: str, points: Path = COMMITTED_POINTS) -> tuple[str, ...]:
    """The committed curve's sweep stages, in the rerun's order, whose point file ran in another precision or on
    another CPU kind than ``this_runtime`` (``Runtime.describe()`` of this machine): what a rerun here tests."""
    chosen = []
    for target in RERUN_ORDER:
        sweep = target.partition("@")[0]
        arm = sweep.removeprefix("sweep_")
        if not sweep.startswith("sweep_") or arm not in SWEPT:
            continue
        committed = json.loads((points / point_file(target)).read_text())
        if run_kind(committed["runtime"]) != run_kind(this_runtime):
            chosen.append(target)
    return tuple(chosen)


# What the transfer sweeps read (sweep_pretrained's deps in dvc.yaml): git keeps no model, so a cross-kind run trains
# them here, in this kind and precision, before its first transfer sweep (unforced: a stage already done is skipped).
TRANSFER_BACKBONES = ("backbone", "masked_patch", "masked_patch_seeds")


def cross_kind_targets(sweeps: tuple[str, ...]) -> tuple[str, ...]:
    """The cross-kind run's ``dvc repro`` targets: the data, the pixel probe at every size (it trains nothing and
    takes seconds, and every comparison with it needs it in both runs), then ``sweeps`` (``other_kind_sweeps``) in
    order, the backbones the transfer sweeps read just before the first of them."""
    targets = ["download", "prepare", *(target for target in RERUN_ORDER if target.startswith("sweep_pixels@"))]
    for target in sweeps:
        if target.startswith("sweep_pretrained@") and TRANSFER_BACKBONES[0] not in targets:
            targets.extend(TRANSFER_BACKBONES)
        targets.append(target)
    return tuple(targets)


def this_runtime() -> str:
    """This machine's ``Runtime.describe()`` under the committed ``params.yaml``: what a stage run here records."""
    sys.path.insert(0, str(REPO))
    from pipeline.core.params_yaml import load_params
    from pipeline.train.runtime import resolve_runtime

    return resolve_runtime(load_params(REPO / "params.yaml").runtime).describe()


def git(*args: str, cwd: Path = REPO) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def changed_files(work: Path) -> list[str]:
    """The files under ``SAVED`` that the worktree's runs wrote or changed (git's view, relative paths)."""
    listed = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all", "--", *SAVED],
        cwd=work,
        check=True,
        capture_output=True,
        text=True,
    ).stdout  # fmt: skip (not stripped: XY codes)
    return sorted(line[3:] for line in listed.splitlines() if (work / line[3:]).is_file())  # not a deleted one


def save_progress(work: Path, progress: Path = PROGRESS) -> list[str]:
    """Copies what the worktree's finished stages wrote (``changed_files``) into ``progress``, replacing it."""
    files = changed_files(work)
    if files:
        shutil.rmtree(progress, ignore_errors=True)
        for name in files:
            (progress / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(work / name, progress / name)
    return files


def restore_progress(work: Path, progress: Path = PROGRESS) -> list[str]:
    """Copies a saved run's files into a new worktree, so that ``dvc repro`` goes on from where it stopped."""
    files = sorted(str(path.relative_to(progress)) for path in progress.rglob("*") if path.is_file())
    for name in files:
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(progress / name, work / name)
    return files


def prepare_worktree(work: Path, run: Run = REPLICATION) -> str:
    """``work`` as a worktree of HEAD with the run's changes to ``params.yaml``, sharing the DVC cache, a new one
    starting from the saved progress; returns the commit whose code runs in it."""
    commit = git("rev-parse", "--short", "HEAD")
    if not (work / ".git").exists():
        git("worktree", "add", "--detach", str(work), "HEAD")
        restored = restore_progress(work, run.progress) if run.progress.exists() else []
        print(f"new worktree {work}" + (f", {len(restored)} files of the saved progress restored" if restored else ""))
    else:
        theirs = git("rev-parse", "--short", "HEAD", cwd=work)
        if theirs != commit and subprocess.run(["git", "diff", "--quiet", theirs, commit, "--", *PIPELINE],
                                               cwd=REPO).returncode:  # fmt: skip
            sys.exit(
                f"{work} is a worktree of commit {theirs}, whose pipeline differs from this commit's; remove "
                f"it (git worktree remove --force {work}) to start from the saved progress, or pick --work"
            )
        commit = theirs
    if run.changes:
        params = yaml.safe_load((work / "params.yaml").read_text())
        (work / "params.yaml").write_text(yaml.safe_dump(changed_params(params, run.changes), sort_keys=False))
    subprocess.run(["dvc", "cache", "dir", "--local", str(REPO / ".dvc" / "cache")], cwd=work, check=True)
    return commit


def changed_params(params: dict, changes: dict) -> dict:
    """``params`` with ``changes`` merged in, section by section (a nested dict changes only the keys it names); a
    key ``params`` lacks is refused, so a renamed parameter cannot pass unnoticed."""
    merged = dict(params)
    for key, value in changes.items():
        if key not in params:
            raise KeyError(f"{key}: not in params.yaml")
        merged[key] = changed_params(params[key], value) if isinstance(value, dict) else value
    return merged


def machine() -> str:
    """This CPU's model name, cores and native bf16 features, as a run's record names them."""
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    cpu = next((line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")),
               platform.processor())  # fmt: skip
    kind = ", ".join(flag for flag in ("avx512_bf16", "amx_bf16") if flag in cpuinfo) or "no native bf16"
    vectors = "AVX512" if "avx512f" in cpuinfo else "AVX2" if "avx2" in cpuinfo else "no AVX2"
    return f"{cpu} ({os.cpu_count()} cores; {vectors}, {kind})"


def record_time(times: Path, commit: str, target: str | None, seconds: float, ok: bool, ran: bool = True) -> None:
    """Appends one ``dvc repro`` call's wall time to ``times`` (a JSON list kept beside the progress folder);
    ``ran`` is false for a call that found its stages done (a resumed run passes them): no stage's time."""
    entries = json.loads(times.read_text()) if times.exists() else []
    at = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    entries.append({"target": target or "(every stage)", "seconds": round(seconds, 1), "finished": ok, "ran": ran,
                    "commit": commit, "cpu": machine(), "at": at})  # fmt: skip
    times.parent.mkdir(parents=True, exist_ok=True)
    times.write_text(json.dumps(entries, indent=1) + "\n")


def dvc_repro(work: Path, target: str | None, single_item: bool = False, force: bool = False) -> bool:
    """Runs ``dvc repro [target]`` in ``work`` (with ``--single-item``: that stage alone, its upstream stages taken
    as they are), its output passed on line by line; whether it ran a stage (a resumed run's call that finds its
    stages done runs none). Raises ``CalledProcessError`` as ``subprocess.run`` does."""
    options = [*(["--force"] if force else []), *(["--single-item"] if single_item else [])]
    command = ["dvc", "repro", *options, *([target] if target else [])]
    ran = False
    with subprocess.Popen(command, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as dvc:
        for line in dvc.stdout:
            ran = ran or line.startswith("Running stage")
            print(line, end="", flush=True)
    if dvc.returncode:
        raise subprocess.CalledProcessError(dvc.returncode, command)
    return ran


def reproduce(work: Path, commit: str, run: Run, only: tuple[str, ...] = ()) -> None:
    """``dvc repro`` of each of the run's targets in turn (or of the stages ``only`` names, each alone), saving the
    progress and the call's time after each."""
    for target in only or run.targets:
        if only and target in TARGETS and (stale := stale_stages(work, run)):
            sys.exit(f"--only {target}: {', '.join(stale)} not yet run with the run's seeds; run them first")
        force = run.force and target.startswith("sweep_")
        if force and (saved := rerun_saved(target, run.progress)):
            print(f"{target}: done in an earlier session ({saved.relative_to(REPO)}), not run again")
            continue
        started, ok, ran = time.monotonic(), False, True  # a call stopped midway is counted as one that ran
        try:
            ran = dvc_repro(work, target, single_item=bool(only) or run.force, force=force)
            ok = True
        finally:
            saved = save_progress(work, run.progress)
            record_time(run.progress.parent / "times.json", commit, target, time.monotonic() - started, ok, ran)
            print(f"{len(saved)} files saved in {run.progress.relative_to(REPO)}: commit them to keep them")


def rerun_saved(target: str, progress: Path) -> Path | None:
    """The point file a forced sweep ``target`` (``sweep_<arm>@<point>``) left in the saved progress, if any: a
    resumed ``--cross-kind`` run does not force it again."""
    path = progress / "metrics" / "data_hunger" / point_file(target)
    return path if path.is_file() else None


def collect(work: Path, commit: str) -> Path:
    """The replication's files in ``metrics/replication/``, with ``run.json`` saying what ran where."""
    target = REPO / "metrics" / "replication"
    target.mkdir(parents=True, exist_ok=True)
    for path in sorted((work / "metrics" / "data_hunger").glob("*_*.json")):
        shutil.copy(path, target / path.name)
    for name in COPIED:
        shutil.copy(work / "metrics" / name, target / name)
    note = {"commit": commit, "changed": SEEDS, "targets": list(TARGETS), "cpu": machine()}
    (target / "run.json").write_text(json.dumps(note, indent=2) + "\n")
    return target


def keep_committed(metrics: Path, kept: Path) -> list[str]:
    """Copies the committed run's result files (``KEPT_BEFORE`` under ``metrics``) into ``kept`` before an adopted
    run's files replace them; an existing ``kept`` is left as it is (a second collection must not overwrite the
    run before with the adopted run's own files). Returns the names copied."""
    if kept.exists():
        return []
    kept.mkdir(parents=True)
    for name in KEPT_BEFORE:
        source = metrics / name
        if source.is_dir():
            shutil.copytree(source, kept / name)
        elif source.is_file():
            shutil.copy2(source, kept / name)
    return sorted(str(path.relative_to(kept)) for path in kept.rglob("*") if path.is_file())


def stale_stages(work: Path, run: Run = REPLICATION) -> list[str]:
    """The run's stages that the worktree's ``dvc.lock`` lacks or holds with other seeds than the run's (the
    committed run's, where the replication has not redone them yet): what data_hunger and evaluate would read
    stale."""
    if "seeds" not in run.changes:
        return []
    lock = yaml.safe_load((work / "dvc.lock").read_text()).get("stages", {})

    def seeds(stage: str) -> list | None:
        return lock[stage].get("params", {}).get("params.yaml", {}).get("seeds")

    needed = [target for target in run.targets if target not in (*TARGETS, "prepare")]
    return [stage for stage in needed if stage not in lock or seeds(stage) not in (None, run.changes["seeds"])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True, help="the worktree to run in (kept, so a run resumes)")
    parser.add_argument("--rerun", action="store_true", help="the committed pipeline again, every stage, same seeds")
    cross_kind_help = "the curve's sweeps that another CPU kind or precision ran, again here (same seeds)"
    parser.add_argument("--cross-kind", action="store_true", help=cross_kind_help)
    adopted_help = "every stage, same seeds, with the changes docs/results.md adopted for the next full run"
    parser.add_argument("--adopted", action="store_true", help=adopted_help)
    parser.add_argument("--collect-only", action="store_true", help="copy a finished run's files, run nothing")
    only_help = "these stages alone, in order, each by dvc repro --single-item (no backbone retrained)"
    parser.add_argument("--only", nargs="+", default=(), metavar="STAGE", help=only_help)
    args = parser.parse_args()
    if sum((args.rerun, args.cross_kind, args.adopted)) > 1:
        parser.error("--rerun, --adopted and --cross-kind are three different runs: give one of them")
    run = RERUN if args.rerun else ADOPTED if args.adopted else REPLICATION
    if args.cross_kind:
        runtime = this_runtime()
        run = Run({}, cross_kind_targets(other_kind_sweeps(runtime)), CROSS_KIND_PROGRESS, force=True)
        print(f"this machine runs {runtime}; the stages to run again here: {', '.join(run.targets[2:]) or 'none'}")
    known = ("download", *(target for target in run.targets if target))  # a new worktree's --only starts there
    if unknown := [stage for stage in args.only if stage not in known]:
        parser.error(f"--only: {', '.join(unknown)} not among the run's stages ({', '.join(known)})")
    if args.only and args.collect_only:
        parser.error("--only runs stages and --collect-only runs none: give one of them")
    work = args.work.resolve()
    commit = prepare_worktree(work, run)
    if not args.collect_only:
        reproduce(work, commit, run, tuple(args.only))
    if args.cross_kind:
        points = (run.progress / "metrics" / "data_hunger").relative_to(REPO)
        print(f"compare: python benchmarks/precision_change.py {points} > metrics/rerun_cpu/comparison.json")
    elif args.only and not set(TARGETS) <= set(args.only) or (args.rerun or args.adopted) and args.only:
        print(f"--only ran {', '.join(args.only)}; the run's files are collected once its last stages have run")
    elif args.rerun or args.adopted:
        if args.adopted and (kept := keep_committed(REPO / "metrics", RUN_BEFORE_ADOPTED)):
            print(f"{len(kept)} files of the run before kept in {RUN_BEFORE_ADOPTED.relative_to(REPO)}")
        adopted = restore_progress(REPO, run.progress)
        if run.changes:
            print(f"set params.yaml's {run.changes} here by hand (its comments kept), then dvc status: up to date")
        print(f"{len(adopted)} files of the rerun now in this checkout (dvc.lock, metrics/, plots/): commit them")
    else:
        print(f"replication files in {collect(work, commit).relative_to(REPO)}")


if __name__ == "__main__":
    main()
