"""benchmarks/replication.py: a stopped run's files saved for git and restored in a new worktree; the rerun's order."""

import os
import subprocess
from pathlib import Path

import pytest
from helpers import benchmark_module

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def replication():
    return benchmark_module("replication")


def git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                   capture_output=True)  # fmt: skip


def test_a_stopped_runs_new_files_go_to_progress_and_back_into_a_new_worktree(replication, tmp_path):
    work = tmp_path / "work"
    (work / "metrics" / "data_hunger").mkdir(parents=True)
    (work / "metrics" / "kept.json").write_text("{}")
    (work / "metrics" / "untouched.json").write_text("{}")
    (work / "dvc.lock").write_text("schema: '2.0'\n")
    (work / "params.yaml").write_text("seeds: [0]\n")
    git("init", "-q", cwd=work)
    git("add", ".", cwd=work)
    git("commit", "-qm", "c", cwd=work)
    # a run: new stages locked, a point file written, the seeds changed; an untouched file stays out
    (work / "dvc.lock").write_text("schema: '2.0'\nstages: {}\n")
    (work / "metrics" / "data_hunger" / "scratch_0.json").write_text('{"point": 0}')
    (work / "params.yaml").write_text("seeds: [5]\n")
    (work / "metrics" / "kept.json").unlink()  # an output DVC removed before its stage was stopped
    progress = tmp_path / "progress"
    (progress / "metrics").mkdir(parents=True)
    (progress / "metrics" / "stale.json").write_text("{}")  # an older save: replaced, not merged
    saved = replication.save_progress(work, progress)
    assert saved == ["dvc.lock", "metrics/data_hunger/scratch_0.json"]
    assert sorted(str(p.relative_to(progress)) for p in progress.rglob("*") if p.is_file()) == saved
    fresh = tmp_path / "fresh"
    (fresh / "metrics").mkdir(parents=True)
    assert replication.restore_progress(fresh, progress) == saved
    assert (fresh / "metrics" / "data_hunger" / "scratch_0.json").read_text() == '{"point": 0}'
    assert (fresh / "dvc.lock").read_text() == "schema: '2.0'\nstages: {}\n"


def test_a_run_that_wrote_nothing_keeps_the_saved_progress(replication, tmp_path):
    work = tmp_path / "work"
    (work / "metrics").mkdir(parents=True)
    (work / "metrics" / "kept.json").write_text("{}")
    git("init", "-q", cwd=work)
    git("add", ".", cwd=work)
    git("commit", "-qm", "c", cwd=work)
    progress = tmp_path / "progress"
    progress.mkdir()
    (progress / "dvc.lock").write_text("x")
    assert replication.save_progress(work, progress) == []
    assert (progress / "dvc.lock").read_text() == "x"


def test_the_rerun_runs_every_stage_and_first_those_no_backbone_session_can_undo(replication):
    """The stages before ``backbone`` read no cached model (their results stay done whatever CPU trains the next
    backbone), and every stage of dvc.yaml is a target or gathered by the final whole-pipeline call."""
    import yaml

    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    order = replication.RERUN.targets
    assert order[-1] is None  # the whole pipeline last: the aggregates (data_hunger, evaluate, plot, summary)
    first_model_reader = order.index("backbone")
    for target in order[:first_model_reader]:
        deps = stages[target.split("@")[0]].get("deps", [])
        assert not [dep for dep in deps if str(dep).startswith("models/")], target
    items = {t.split("@")[0] for t in order[:-1]}
    aggregates = {name for name, stage in stages.items() if name not in items}
    for name in aggregates:  # only quick stages that gather files are left to the final call
        outs = [str(out) for out in stages[name].get("outs", []) if isinstance(out, str)]
        assert "foreach" not in stages[name] and not [out for out in outs if out.startswith("models/")], name


def test_each_dvc_repro_call_is_timed_with_its_machine(replication, tmp_path):
    times = tmp_path / "times.json"
    replication.record_time(times, "abc1234", "sweep_cnn@0", 12.34, True)
    replication.record_time(times, "abc1234", None, 1.0, False)
    replication.record_time(times, "abc1234", "sweep_cnn@0", 3.2, True, ran=False)  # resumed: found it done
    import json

    entries = json.loads(times.read_text())
    assert [(e["target"], e["seconds"], e["finished"], e["ran"]) for e in entries] == [
        ("sweep_cnn@0", 12.3, True, True),
        ("(every stage)", 1.0, False, True),
        ("sweep_cnn@0", 3.2, True, False),
    ]
    assert "cores" in entries[0]["cpu"]


def test_the_replication_runs_what_the_comparison_reads_in_the_reruns_order(replication):
    order = replication.REPLICATION.targets
    assert order[-2:] == ("data_hunger", "evaluate")
    assert [t for t in replication.RERUN_ORDER if t in order] == list(order[:-2])
    assert "sweep_scratch@4" in order and "masked_patch_seeds" in order and "collapse" not in order


@pytest.mark.parametrize(("output", "code", "ran"), [
    ("Stage 'prepare' didn't change, skipping\nData and pipelines are up to date.\n", 0, False),
    ("Stage 'prepare' didn't change, skipping\nRunning stage 'sweep_cnn@0':\n> python -m x\n", 0, True),
    ("Running stage 'sweep_cnn@0':\nERROR: failed\n", 1, None),
])  # fmt: skip
def test_a_call_says_whether_dvc_ran_a_stage(replication, tmp_path, monkeypatch, capsys, output, code, ran):
    """A resumed run's calls that find their stages done are told apart from those that ran one (their times are
    no stage's time); dvc's output still reaches the log, and a failed call raises."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "dvc").write_text(f'#!/bin/sh\nprintf %s "{output}"\nexit {code}\n')
    (bin_dir / "dvc").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    if ran is None:
        with pytest.raises(subprocess.CalledProcessError):
            replication.dvc_repro(tmp_path, "sweep_cnn@0")
    else:
        assert replication.dvc_repro(tmp_path, "sweep_cnn@0") is ran
    assert capsys.readouterr().out == output


def test_only_runs_the_named_stages_each_alone_in_the_order_given(replication, tmp_path, monkeypatch):
    """--only: a session that must not retrain the backbones runs the stages it names by dvc repro --single-item."""
    calls = []
    monkeypatch.setattr(replication, "dvc_repro", lambda work, target, single_item=False, force=False: calls.append(
        (target, single_item)) or True)  # fmt: skip
    monkeypatch.setattr(replication, "save_progress", lambda work, progress: [])
    run = replication.Run({}, ("sweep_cnn@0", "data_hunger"), tmp_path / "progress")
    monkeypatch.setattr(replication, "REPO", tmp_path)
    replication.reproduce(tmp_path, "abc1234", run, ("sweep_scratch@4", "data_hunger"))
    assert calls == [("sweep_scratch@4", True), ("data_hunger", True)]
    calls.clear()
    replication.reproduce(tmp_path, "abc1234", run)
    assert calls == [("sweep_cnn@0", False), ("data_hunger", False)]


def run_main(replication, monkeypatch, *argv: str, worktree=lambda work, run: "abc1234") -> None:
    """The script's main with these arguments, no worktree made and no stage run (each would fail the test)."""
    import sys

    monkeypatch.setattr(sys, "argv", ["replication.py", "--work", "unused", *argv])
    monkeypatch.setattr(replication, "prepare_worktree", worktree)
    monkeypatch.setattr(replication, "reproduce", lambda *args: None)
    monkeypatch.setattr(replication, "collect", lambda work, commit: pytest.fail("collected a partial run"))
    monkeypatch.setattr(replication, "restore_progress", lambda *args: pytest.fail("adopted a partial rerun"))
    replication.main()


@pytest.mark.parametrize("argv", [("--only", "sweep_scratch@9"), ("--only", "collapse"),
                                  ("--only", "evaluate", "--collect-only")])  # fmt: skip
def test_only_refuses_a_stage_the_run_does_not_have_in_one_message(replication, monkeypatch, capsys, argv):
    with pytest.raises(SystemExit) as stopped:
        run_main(replication, monkeypatch, *argv, worktree=lambda work, run: pytest.fail("made a worktree"))
    assert stopped.value.code == 2
    (message,) = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert "not among the run's stages (download, prepare," in message or "give one of them" in message


@pytest.mark.parametrize("argv", [("--only", "sweep_scratch@4"), ("--rerun", "--only", "collapse")])
def test_a_partial_only_run_neither_collects_nor_adopts_its_files(replication, monkeypatch, capsys, argv):
    run_main(replication, monkeypatch, *argv)
    assert "collected once its last stages have run" in capsys.readouterr().out


def test_data_hunger_and_evaluate_wait_for_every_stage_to_have_the_runs_seeds(replication, tmp_path, monkeypatch):
    """--single-item looks at no upstream stage: the committed run's point files, still in the worktree, would be
    read as the replication's."""
    import yaml

    run = replication.Run({"seeds": [5, 6]}, ("prepare", "sweep_cnn@0", "sweep_cnn@1", "backbone", "data_hunger",
                                              "evaluate"), tmp_path / "progress")  # fmt: skip
    stage = {"params": {"params.yaml": {"seeds": [5, 6]}}}
    lock = {"stages": {"prepare": {}, "sweep_cnn@0": stage, "backbone": {},
                       "sweep_cnn@1": {"params": {"params.yaml": {"seeds": [0, 1]}}}}}  # fmt: skip
    (tmp_path / "dvc.lock").write_text(yaml.safe_dump(lock))
    assert replication.stale_stages(tmp_path, run) == ["sweep_cnn@1"]
    del lock["stages"]["backbone"]
    (tmp_path / "dvc.lock").write_text(yaml.safe_dump(lock))
    assert replication.stale_stages(tmp_path, run) == ["sweep_cnn@1", "backbone"]
    calls = []
    monkeypatch.setattr(replication, "dvc_repro", lambda work, target, single_item=False, force=False: calls.append(
        target))  # fmt: skip
    with pytest.raises(SystemExit, match=r"--only data_hunger: sweep_cnn@1, backbone not yet run with the run's"):
        replication.reproduce(tmp_path, "abc1234", run, ("data_hunger",))
    assert calls == []
    assert replication.stale_stages(tmp_path, replication.RERUN) == []  # the rerun keeps the committed seeds


ZEN4 = "cpu bf16 (AVX512, native bf16: avx512_bf16 (step 1.73x))"
AVX2 = "cpu fp32 (AVX2, no native bf16)"


def test_a_runs_kind_is_its_runtime_less_the_step_probes_ratio(replication):
    assert replication.run_kind(ZEN4) == "cpu bf16 (AVX512, native bf16: avx512_bf16)"
    assert replication.run_kind(ZEN4.replace("1.73", "1.5")) == replication.run_kind(ZEN4)
    assert replication.run_kind(AVX2) == AVX2


def write_points(folder: Path, runtimes: dict[str, str]) -> None:
    import json

    folder.mkdir(parents=True, exist_ok=True)
    for name, runtime in runtimes.items():
        (folder / f"{name}.json").write_text(json.dumps({"runtime": runtime}))


def test_the_cross_kind_rerun_runs_the_sweeps_another_kind_or_precision_ran(replication, tmp_path):
    """The committed run's point files name where each cell ran: here, the small ResNet and the ViT from scratch
    up to 250 per class on a Zen 4 in bf16, the rest in fp32 on an AVX2 EPYC."""
    runtimes = {f"{arm}_{point}": ZEN4 if arm == "cnn" or arm == "scratch" and point < 4 else AVX2
                for arm in ("scratch", "cnn", "finetune") for point in range(5)}  # fmt: skip
    write_points(tmp_path, runtimes)
    on_avx2 = replication.other_kind_sweeps(AVX2, tmp_path)
    assert on_avx2 == ("sweep_scratch@0", "sweep_cnn@0", "sweep_scratch@1", "sweep_cnn@1", "sweep_cnn@2",
                       "sweep_scratch@2", "sweep_cnn@3", "sweep_scratch@3", "sweep_cnn@4")  # fmt: skip
    on_another_zen4 = replication.other_kind_sweeps(ZEN4.replace("1.73", "1.61"), tmp_path)
    assert set(on_another_zen4) == {"sweep_scratch@4", *(f"sweep_pretrained@{point}" for point in range(5))}
    assert replication.other_kind_sweeps(AVX2.replace("fp32", "bf16"), tmp_path) == tuple(
        t for t in replication.RERUN_ORDER if t.split("@")[0] in ("sweep_scratch", "sweep_cnn", "sweep_pretrained")
    )


def test_the_cross_kind_rerun_trains_the_transfer_backbones_before_its_first_transfer_sweep(replication):
    """git keeps no model: the transfer sweeps' backbones are trained in the run, once, just before they are read;
    the pixel probe runs first, wherever its committed run ran, so that its comparisons have both runs."""
    sweeps = ("sweep_scratch@3", "sweep_pretrained@0", "sweep_pretrained@1", "sweep_scratch@4")
    pixels = tuple(f"sweep_pixels@{point}" for point in range(5))
    assert replication.cross_kind_targets(sweeps) == (
        "download", "prepare", *pixels, "sweep_scratch@3", "backbone", "masked_patch", "masked_patch_seeds",
        "sweep_pretrained@0", "sweep_pretrained@1", "sweep_scratch@4",
    )  # fmt: skip
    assert replication.cross_kind_targets(("sweep_cnn@4",)) == ("download", "prepare", *pixels, "sweep_cnn@4")
    import yaml

    deps = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["sweep_pretrained"]["deps"]
    models = {dep.removeprefix("models/").removesuffix(".pt") for dep in deps if dep.startswith("models/")}
    assert models == set(replication.TRANSFER_BACKBONES)


def test_the_cross_kind_rerun_reads_this_machines_real_runtime(replication):
    """Not a patched detection: this machine's line as a stage would record it, and the committed cells that ran
    on its kind are the ones left out."""
    import json

    runtime = replication.this_runtime()
    assert runtime.startswith(("cpu fp32", "cpu bf16", "cuda", "mps")), runtime
    chosen = set(replication.other_kind_sweeps(runtime))
    for path in sorted((ROOT / "metrics" / "data_hunger").glob("*_*.json")):
        arm, point = path.stem.split("_")
        if arm not in ("scratch", "cnn", "finetune"):
            continue
        sweep = f"sweep_{'pretrained' if arm == 'finetune' else arm}@{point}"
        same_kind = replication.run_kind(json.loads(path.read_text())["runtime"]) == replication.run_kind(runtime)
        assert (sweep in chosen) is not same_kind, sweep


def test_a_cross_kind_rerun_forces_its_sweeps_alone_and_skips_those_an_earlier_session_saved(
        replication, tmp_path, monkeypatch):  # fmt: skip
    calls = []
    monkeypatch.setattr(replication, "dvc_repro", lambda work, target, single_item=False, force=False: calls.append(
        (target, single_item, force)) or True)  # fmt: skip
    monkeypatch.setattr(replication, "save_progress", lambda work, progress: [])
    monkeypatch.setattr(replication, "REPO", tmp_path)
    progress = tmp_path / "progress"
    write_points(progress / "metrics" / "data_hunger", {"scratch_0": AVX2, "finetune_1": AVX2})
    targets = ("download", "prepare", "sweep_scratch@0", "sweep_cnn@0", "sweep_pretrained@1", "sweep_pretrained@2")
    replication.reproduce(tmp_path, "abc1234", replication.Run({}, targets, progress, force=True))
    assert calls == [("download", True, False), ("prepare", True, False), ("sweep_cnn@0", True, True),
                     ("sweep_pretrained@2", True, True)]  # fmt: skip


def test_a_forced_call_passes_force_to_dvc(replication, tmp_path, monkeypatch, capsys):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "dvc").write_text('#!/bin/sh\necho "$@"\n')
    (bin_dir / "dvc").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    replication.dvc_repro(tmp_path, "sweep_cnn@0", single_item=True, force=True)
    replication.dvc_repro(tmp_path, "prepare")
    assert capsys.readouterr().out == "repro --force --single-item sweep_cnn@0\nrepro prepare\n"


def test_the_cross_kind_rerun_neither_collects_nor_adopts_and_says_how_to_compare(replication, monkeypatch, capsys):
    monkeypatch.setattr(replication, "this_runtime", lambda: ZEN4)  # the committed trained sweeps ran on AVX2
    run_main(replication, monkeypatch, "--cross-kind")
    out = capsys.readouterr().out
    assert "the stages to run again here: sweep_" in out
    assert "python benchmarks/precision_change.py metrics/rerun_cpu/progress/metrics/data_hunger" in out


@pytest.mark.parametrize("runs", [("--rerun", "--cross-kind"), ("--rerun", "--adopted"), ("--adopted", "--cross-kind")])
def test_two_kinds_of_run_together_are_refused(replication, monkeypatch, capsys, runs):
    with pytest.raises(SystemExit) as stopped:
        run_main(replication, monkeypatch, *runs)
    assert stopped.value.code == 2
    assert "give one of them" in capsys.readouterr().err


def test_the_adopted_run_changes_only_its_keys_of_the_committed_params(replication):
    """The next full run: every stage in the rerun's order, its own progress folder (not the accuracy rule's run's,
    which is kept), and params.yaml as committed but for ADOPTED_CHANGES: successive halving and the monitor, the
    two changes docs/results.md wrote before the run, nothing else."""
    import yaml

    committed = yaml.safe_load((ROOT / "params.yaml").read_text())
    adopted = replication.changed_params(committed, replication.ADOPTED.changes)
    assert replication.ADOPTED.targets == replication.RERUN.targets
    kept = ROOT / "metrics" / "rerun_adopted" / "progress"
    assert replication.ADOPTED.progress not in (replication.RERUN.progress, replication.PROGRESS, kept)
    assert replication.ADOPTED.changes == {"data_hunger": {"choice_keep": 2, "monitor_per_class": 100}}
    assert (committed["data_hunger"]["choice_keep"], committed["data_hunger"]["monitor_per_class"]) == (0, 0)
    assert {k: v for k, v in adopted["data_hunger"].items() if committed["data_hunger"][k] != v} == {
        "choice_keep": 2,
        "monitor_per_class": 100,
    }
    assert {k: v for k, v in adopted.items() if k != "data_hunger"} == {
        k: v for k, v in committed.items() if k != "data_hunger"
    }


def test_a_change_to_a_parameter_params_yaml_lacks_is_refused(replication):
    with pytest.raises(KeyError, match="plateau_scor"):
        replication.changed_params({"data_hunger": {"plateau_score": "loss"}}, {"data_hunger": {"plateau_scor": 1}})


def test_the_adopted_run_needs_no_seeds_check_before_its_aggregates(replication, tmp_path):
    (tmp_path / "dvc.lock").write_text("stages: {}\n")
    assert replication.stale_stages(tmp_path, replication.ADOPTED) == []


def test_collecting_the_adopted_run_keeps_the_run_before_once(replication, tmp_path):
    metrics = tmp_path / "metrics"
    (metrics / "data_hunger").mkdir(parents=True)
    (metrics / "data_hunger" / "scratch_0.json").write_text('{"run": "before"}')
    (metrics / "comparisons.json").write_text('{"run": "before"}')
    (metrics / "repro_time.json").write_text("{}")  # not a result of the run: not kept
    kept = metrics / "run_before"
    assert replication.keep_committed(metrics, kept) == ["comparisons.json", "data_hunger/scratch_0.json"]
    (metrics / "comparisons.json").write_text('{"run": "adopted"}')
    assert replication.keep_committed(metrics, kept) == []  # collected again: the run before stays
    assert (kept / "comparisons.json").read_text() == '{"run": "before"}'
