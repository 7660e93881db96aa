"""The README's and docs' readings of the comparisons: each pair's verdicts in a sentence, every comparison in one
row with Holm's verdict and the second runs', and the README's first screen (:func:`answer`)."""

from __future__ import annotations

from pipeline.core.arm_registry import REGISTRY
from pipeline.results.report_tables import signed, slopes_reading
from pipeline.results.stats import paired_difference


def comparisons_table(comparisons: dict) -> str:
    """Every stated comparison at every size: the paired difference over seeds, its 95% t interval, the verdict
    (ahead / behind where the interval excludes 0, level where it does not)."""
    pairs = comparisons["curve"]
    sizes = sorted({n for by_size in pairs.values() for n in by_size}, key=int)
    lines = [
        "| A - B (paired by seed) | " + " | ".join(f"{n} per class" for n in sizes) + " |",
        "|---" * (len(sizes) + 1) + "|",
    ]
    for pair, by_size in pairs.items():
        a, b = pair.split("-")
        cells = []
        for n in sizes:
            d = by_size.get(n)
            cells.append("" if d is None else f"{signed(d['mean'])} [{signed(d['low'])}, {signed(d['high'])}] "
                                              f"{d['verdict']}")  # fmt: skip
        lines.append(f"| {REGISTRY[a].label} - {REGISTRY[b].label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# The second runs of the curve (docs/reproducibility.md): their comparison files and how a reading names them.
SECOND_RUNS = {
    "precision_change.json": "the fp32 rerun",
    "precision_change_zen4.json": "the Zen 4 rerun",
    # the fresh-seed replication of the loss rule's run, kept beside that run since the accuracy rule's replaced it
    "run_before_accuracy_rule/replication/comparison.json": "the loss rule's replication",
    # the fresh-seed replication of the committed run (the accuracy rule's), seeds 5-9
    "replication/comparison.json": "the committed run's replication",
    # the committed run's sweeps again with its seeds in bf16 on a Zen 4 (it ran in fp32 on an AVX2 EPYC)
    "rerun_cpu/comparison.json": "the committed run's cross-kind check",
}


def verdicts_elsewhere(pair: str, n: str, shown: dict, second_runs: dict[str, dict]) -> str:
    """Each second run's verdict on ``pair`` at ``n`` where it is not the ``shown`` comparison's: "; *level* in
    the fp32 rerun". A second run compared with other results than these (after a rerun here) names none."""
    found = [(name, change["comparisons"].get(n, {}).get(pair)) for name, change in second_runs.items()]
    moved = [
        (name, c["other"]["verdict"])
        for name, c in found
        if c and same_difference(c["reference"], shown) and c["other"]["verdict"] != shown["verdict"]
    ]
    return "".join(f"; *{verdict}* in {name}" for name, verdict in moved)


def readings(comparisons: dict, second_runs: dict[str, dict] | None = None) -> str:
    """One generated sentence per stated comparison: at which sizes A is ahead of, level with or behind B (95%
    paired t interval over the seeds), with the difference at each size, and the verdict of each second run
    (``second_runs``: a name for each precision_change file) where it differs. Hand-written prose cites these
    rather than numbers of its own."""
    lines = []
    for pair, by_size in comparisons["curve"].items():
        a, b = pair.split("-")
        groups: dict[str, list[str]] = {"ahead": [], "level": [], "behind": []}
        for n in sorted(by_size, key=int):
            d = by_size[n]
            elsewhere = verdicts_elsewhere(pair, n, d, second_runs or {})
            groups[d["verdict"]].append(
                f"{n} ({signed(d['mean'])} [{signed(d['low'])}, {signed(d['high'])}]{elsewhere})"
            )
        parts = [f"{verdict} at {', '.join(sizes)}" for verdict, sizes in groups.items() if sizes]
        lines.append(f"- **{REGISTRY[a].label}** against **{REGISTRY[b].label}**: " + "; ".join(parts) + " per class.")
    return "\n".join(lines)


def _cells(comparisons: dict):
    for pair, by_size in comparisons["curve"].items():
        for n in sorted(by_size, key=int):
            yield pair, n, by_size[n]


def _by_pair(cells: list[tuple[str, str, dict]]) -> str:
    """``small ResNet from scratch ahead of ViT from scratch at 75, 250 per class; ...``"""
    grouped: dict[tuple[str, str], list[str]] = {}
    for pair, n, d in cells:
        grouped.setdefault((pair, d["verdict"]), []).append(n)
    phrases = []
    for (pair, verdict), sizes in grouped.items():
        a, b = pair.split("-")
        relation = "ahead of" if verdict == "ahead" else "behind"
        phrases.append(f"{REGISTRY[a].label} {relation} {REGISTRY[b].label} at {', '.join(sizes)}")
    return "; ".join(phrases) + " per class" if phrases else "none"


def tested_rows(comparisons: dict, second_runs: dict[str, dict]) -> set[tuple[str, str]]:
    """The (pair, size) rows that some second run was held against: its reference difference is the shown one,
    mean and interval (a rerun may leave one arm's mean as it was and move its seeds, and so the interval). A
    second run may cover some rows only (a replication under way, or one whose point files cover some arms)."""
    return {(pair, n) for pair, n, d in _cells(comparisons)
            if any(same_difference(change["comparisons"].get(n, {}).get(pair, {}).get("reference", {}), d)
                   for change in second_runs.values())}  # fmt: skip


def same_difference(reference: dict, shown: dict) -> bool:
    """Whether a second run's reference cell is the shown comparison: the same mean and 95% interval."""
    return bool(reference) and all(reference.get(key) == shown[key] for key in ("mean", "low", "high"))


def testing_runs(comparisons: dict, second_runs: dict[str, dict]) -> list[str]:
    """The second runs made against these results: those that hold at least one shown row (``tested_rows``).
    After a rerun replaces the results, the second runs of the run before it test nothing shown."""
    return [name for name, change in second_runs.items() if tested_rows(comparisons, {name: change})]


def answer(
    evaluate: dict, curve: dict, comparisons: dict, second_runs: dict[str, dict], scale: dict | None = None,
    collapse: dict | None = None,
) -> str:  # fmt: skip
    """The README's first screen: what the committed run says, each sentence's numbers from the committed files.
    A verdict *holds* where its 95% interval excludes zero, Holm's step-down over every comparison keeps it, a
    second run was held against it and none reached another verdict at that size; it is *unsettled* where the
    interval, Holm or a second run fails it, and *not yet replicated* where no second run has it. While no second
    run tests these results (a rerun has just replaced them), none is said to hold: the line names what survives
    Holm and waits for the replication."""
    cells = list(_cells(comparisons))
    nominal = [(p, n, d) for p, n, d in cells if d["verdict"] != "level"]
    moved = {(p, n) for p, n, d in cells if verdicts_elsewhere(p, n, d, second_runs)}
    survivors = [(p, n, d) for p, n, d in nominal if d.get("holm", d["verdict"]) != "level" and (p, n) not in moved]
    tested = tested_rows(comparisons, second_runs)
    holds = [(p, n, d) for p, n, d in survivors if (p, n) in tested]
    pending = [(p, n, d) for p, n, d in survivors if (p, n) not in tested]
    unsettled = [(p, n, d) for p, n, d in nominal if (p, n, d) not in survivors]
    scratch, linear = evaluate["scratch"], evaluate["linear"]
    sizes = sorted(curve["scratch"], key=int)
    low, high = curve["scratch"][sizes[0]]["mean"], curve["scratch"][sizes[-1]]["mean"]
    n = str(evaluate["protocol"]["n_train_per_class"])
    headline = {pair: comparisons["curve"][pair][n] for pair in ("linear-scratch", "finetune-scratch")}
    pretrained = "; ".join(
        f"{REGISTRY[pair.split('-')[0]].label}: {signed(d['mean'])} [{signed(d['low'])}, {signed(d['high'])}], "
        f"{d['verdict']}"
        + (f", {d['holm']} after Holm" if "holm" in d and d["holm"] != d["verdict"] else "")
        + verdicts_elsewhere(pair, n, d, second_runs).replace("; ", ", ").replace("*", "")
        for pair, d in headline.items()
    )
    lines = [
        f"- **Seed 000 reproduces as it ran.** Its ViT from scratch scores {scratch['test_acc']['mean']:.3f} on "
        f"{evaluate['n_test']} test images (one class for every image: collapse {scratch['collapse']:.2f}); "
        f"the frozen pretrained ViT with a trained head {linear['test_acc']['mean']:.3f} ± "
        f"{linear['test_acc']['std']:.3f}.",
        f"- **It does not survive converged training.** Trained until its validation curve levels off, the ViT from "
        f"scratch scores {low:.3f} at {sizes[0]} and {high:.3f} at {sizes[-1]} images per class (chance "
        f"{evaluate['baselines']['chance']:.3f}), and pretraining this small backbone buys it little: against it "
        f"at {n} per class, {pretrained} (paired by seed, 95% interval).",
    ]
    tested_by = testing_runs(comparisons, second_runs)
    if tested_by:
        lines += [
            f"- **What holds** ({len(holds)} of {len(cells)} comparisons: the interval excludes zero, Holm's "
            f"correction over all {len(cells)} keeps it, and a second run agrees ({', '.join(tested_by)})): "
            f"{_by_pair(holds)}.",
            *(
                [
                    f"- **Survives Holm, not yet replicated** ({len(pending)} more: no second run has these yet): "
                    f"{_by_pair(pending)}."
                ]
                if pending
                else []
            ),  # fmt: skip
            f"- **Unsettled** ({len(unsettled)} more are nominally ahead or behind, but fail Holm or moved in a "
            f"second run): {_by_pair(unsettled)}. The rest are level.",
        ]
    else:
        lines += [
            f"- **What survives Holm, not yet replicated** ({len(survivors)} of {len(cells)} comparisons: the "
            f"interval excludes zero and Holm's correction over all {len(cells)} keeps it; no second run has tested "
            f"these results yet, and a verdict is called settled only once the fresh-seed replication keeps it): "
            f"{_by_pair(survivors)}.",
            f"- **Unsettled** ({len(unsettled)} more are nominally ahead or behind, but fail Holm): "
            f"{_by_pair(unsettled)}. The rest are level.",
        ]
    if primary_sentence(comparisons):
        lines.append(primary_sentence(comparisons))
    if collapse:
        lines.append(collapse_sentence(collapse))
    if scale and "slopes" in scale:
        sizes = sorted(scale["vit"], key=int)
        lines.append(
            f"- **The paper's own claim** (Figures 3-4: pretrained on small sets ResNets lead, and the ViT, gaining "
            f"more per decade of pretraining images, overtakes them from about 90M) **in miniature**, pretrained "
            f"on {int(sizes[0]):,} to {int(sizes[-1]):,} images: {slopes_reading(scale)[len('Against Figure 4: ') :]}"
        )
    return "\n".join(lines)


def verdict_table(comparisons: dict, second_runs: dict[str, dict]) -> str:
    """Every comparison at every size, one row each, to scan: the difference, its interval, the verdict, Holm's
    verdict and each second run's where it differs; "same" where a second run held against these results has
    this row and agrees, "not tested yet" where none has it (a rerun has just replaced the results, or a second
    run so far covers some arms only), where "same" would claim an agreement nobody measured."""
    rows = ["| comparison | per class | difference | 95% interval | verdict | after Holm | primary: after Holm over "
            "the primary family | second runs |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    tested = tested_rows(comparisons, second_runs)
    for pair, n, d in _cells(comparisons):
        a, b = pair.split("-")
        elsewhere = (verdicts_elsewhere(pair, n, d, second_runs).removeprefix("; ").replace("; ", ", ")
                     or ("same" if (pair, n) in tested else "not tested yet"))  # fmt: skip
        rows.append(f"| {REGISTRY[a].label} - {REGISTRY[b].label} | {n} | {signed(d['mean'])} | "
                    f"[{signed(d['low'])}, {signed(d['high'])}] | {d['verdict']} | {d.get('holm', '')} | "
                    f"{d.get('holm_primary', '')} | {elsewhere} |")  # fmt: skip
    return "\n".join(rows)


# what each change toward the protocol supplies, for the collapse sentence's reading (pipeline.arms.scratch)
COLLAPSE_CAUSES = {
    "decoupled_decay": "how the weight decay is applied", "lr": "its learning rate", "warmup": "the lack of warmup",
    "clipping": "the lack of gradient clipping", "plateau_steps": "too little training", "augment": "no augmentation",
}  # fmt: skip


def collapse_sentence(collapse: dict) -> str:
    """The collapse isolated: which single change of seed 000's recipe toward the protocol lifts its ViT from
    scratch off chance, each as a paired difference against the recipe, and the protocol's all at once."""
    seed, changes = collapse["runs"]["seed"], collapse["against_seed"]
    single = [name for name in collapse["order"] if name not in ("seed", "protocol")]
    lifts = [name for name in single if changes[name]["verdict"] == "ahead"]

    def phrase(name: str) -> str:
        d = changes[name]
        return f"{name.replace('_', ' ')} {signed(d['mean'])} [{signed(d['low'])}, {signed(d['high'])}]"

    protocol = changes["protocol"]
    sentence = (
        f"- **The collapse, one change at a time** (seed 000's recipe at {collapse['n_train_per_class']} per class, "
        f"{len(collapse['seeds'])} seeds, each change paired with the recipe): the recipe scores "
        f"{seed['test_acc']['mean']:.3f} (collapse {seed['collapse']['mean']:.2f}); "
        + (f"alone, only {', '.join(phrase(n) for n in lifts)} lift{'s' if len(lifts) == 1 else ''} it "
           f"(the interval above 0)" if lifts else "no single change lifts it (every interval includes 0 or is "
           "below it)")
        + f"; the others: {', '.join(phrase(n) for n in single if n not in lifts)}; all of them together, the "
        f"protocol: {signed(protocol['mean'])} [{signed(protocol['low'])}, {signed(protocol['high'])}]."
    )  # fmt: skip
    if not lifts:
        return sentence + " No single difference from the protocol explains the collapse; only their sum does."
    best = max(lifts, key=lambda name: changes[name]["mean"])
    rest = paired_difference(collapse["runs"]["protocol"]["test_acc"]["per_seed"],
                             collapse["runs"][best]["test_acc"]["per_seed"])  # fmt: skip
    return sentence + (
        f" What this shows: the collapse is chiefly {COLLAPSE_CAUSES[best]} ({best.replace('_', ' ')} alone leaves "
        f"chance), and the other changes, none enough alone, add {signed(rest['mean'])} "
        f"[{signed(rest['low'])}, {signed(rest['high'])}] on top of it together (paired)."
    )


def primary_sentence(comparisons: dict) -> str:
    """The primary comparisons (named in params.yaml before the run that tests them), each with its interval,
    nominal verdict and Holm's verdict over the primary family alone; empty where none is named."""
    cells = [(pair, n, d) for pair, n, d in _cells(comparisons) if "holm_primary" in d]
    if not cells:
        return ""
    parts = [f"{REGISTRY[pair.split('-')[0]].label} - {REGISTRY[pair.split('-')[1]].label} at {n}: "
             f"{signed(d['mean'])} [{signed(d['low'])}, {signed(d['high'])}], {d['verdict']}, {d['holm_primary']} "
             "after Holm" for pair, n, d in cells]  # fmt: skip
    return (
        f"- **The primary comparisons** ({len(cells)}, named in params.yaml before the rerun that is to test "
        f"them; Holm over these {len(cells)} alone): " + "; ".join(parts) + " (per class)."
    )
