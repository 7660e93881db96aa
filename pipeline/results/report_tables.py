"""The README's and docs' generated tables, built from the committed metrics files' contents (no file I/O here:
``python -m pipeline.tools.report`` reads the files and fills the marked blocks)."""

from __future__ import annotations

from pipeline.core import paths
from pipeline.core.arm_registry import DECAY_VARIANTS, REGISTRY, TABLE_ORDER


def mean_std(value: dict) -> str:
    return f"{value['mean']:.3f} ± {value['std']:.3f}"


def results_table(metrics: dict) -> str:
    """The arms beside the baselines, as a markdown table."""
    seeds = len(metrics["scratch"]["test_acc"]["per_seed"])
    lines = [
        f"Preset `{metrics['preset']}`: classes {', '.join(metrics['classes'])}; {metrics['n_train']} training and "
        f"{metrics['n_test']} test images; {seeds} seeds; {metrics.get('runtime', '')}.",
        "",
        "| model | test accuracy (mean ± std) | per seed | test loss | collapse | trainable / total params "
        "| file MB (model / head) |",
        "|---|---|---|---|---|---|---|",
    ]
    for arm, name in ((arm, REGISTRY[arm].label) for arm in paths.HEADLINE_VIEWS):
        m = metrics[arm]
        acc, loss = m["test_acc"], m["test_loss"]
        per_seed = ", ".join(f"{a:.3f}" for a in acc["per_seed"])
        lines.append(
            f"| {name} (seed 000's recipe) | **{mean_std(acc)}** | {per_seed} | {loss['mean']:.3f} "
            f"| {m['collapse']:.2f} | {m['params']['trainable']:,} / {m['params']['total']:,} "
            f"| {m['file_size_mb']['model']:.2f} / {m['file_size_mb']['head']:.3f} |"
        )
    protocol = metrics["protocol"]
    for arm in TABLE_ORDER:
        acc = protocol[arm]
        per_seed = ", ".join(f"{a:.3f}" for a in acc["per_seed"])
        lines.append(f"| {REGISTRY[arm].label} (protocol, {protocol['n_train_per_class']}/class) | **{mean_std(acc)}** "
                     f"| {per_seed} | | | | |")  # fmt: skip
    baselines = metrics["baselines"]
    logreg = baselines["pixels_logreg"]
    lines.append(f"| Logistic regression on raw pixels (same images, mean over seeds) | {logreg:.3f} | | | | | |")
    lines.append(f"| Majority training class | {baselines['majority']:.3f} | | | | | |")
    lines.append(f"| Chance | {baselines['chance']:.3f} | | | | | |")
    return "\n".join(lines)


def curve_table(curve: dict) -> str:
    """Test accuracy per arm and training-set size; the best arm of each size in bold."""
    arms = [arm for arm in TABLE_ORDER if arm in curve]
    lines = [
        "| per class | " + " | ".join(REGISTRY[arm].label for arm in arms) + " | logistic regression on pixels |",
        "|---" * (len(arms) + 2) + "|",
    ]
    for size in sorted(curve[arms[0]], key=int):
        best = max(arms, key=lambda arm: curve[arm][size]["mean"])
        cells = [f"**{mean_std(curve[arm][size])}**" if arm == best else mean_std(curve[arm][size]) for arm in arms]
        logreg = curve["baselines"][size].get("pixels_logreg")
        cells.append(f"{logreg:.3f}" if logreg is not None else "(not fit)")
        lines.append(f"| {size} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def runs_table(curve: dict) -> str:
    """What the validation rule did: each trained arm's chosen lr (``*`` where it is an end of the grid), kept
    step / steps run / budget (mean over seeds), runs stopped by the cap and at the floor (their cooldown begun at
    the first score the rule allows; ``-`` where the aggregation predates the count), and the kept weights'
    train loss;
    each probe's ridges (``*`` at an end of the grid)."""
    trained = [arm for arm in TABLE_ORDER if arm in curve["runs"] and "lr" in next(iter(curve["runs"][arm].values()))]
    probes = [arm for arm in TABLE_ORDER if arm in curve["runs"] and arm not in trained]
    lines = [
        "| per class | " + " | ".join(f"{REGISTRY[arm].label}: lr, kept / last step of budget, at cap / floor, "
                                     "train loss"
                                     for arm in trained)
        + " | " + " | ".join(f"{REGISTRY[arm].label}: ridge" for arm in probes) + " |",
        "|---" * (len(trained) + len(probes) + 1) + "|",
    ]  # fmt: skip
    for size in sorted(curve["runs"][trained[0]], key=int):
        cells = []
        for arm in trained:
            run = curve["runs"][arm][size]
            edge = "*" if run.get("lr_at_edge") else ""
            steps = f"{run['best_step']['mean']:.0f} / {run['steps']['mean']:.0f} of {run.get('budget', '?')}"
            ends = f"{run['stopped_at_cap']} / {run.get('stopped_at_floor', '-')}"
            cells.append(f"{run['lr']:g}{edge}, {steps}, {ends}, {run['train_loss']['mean']:.3f}")
        for arm in probes:
            run = curve["runs"][arm][size]
            edges = run.get("reg_at_edge", [""] * len(run.get("reg", [])))
            cells.append(", ".join(f"{r:g}{'*' if e else ''}" for r, e in zip(run.get("reg", []), edges, strict=True)))
        lines.append(f"| {size} | " + " | ".join(cells) + " |")
    cells = [curve["runs"][arm][size] for arm in trained for size in curve["runs"][arm]]
    if all("stopped_at_floor" in run for run in cells):
        runs = sum(len(run["steps"]["per_seed"]) for run in cells)
        cap, floor = (sum(run[key] for run in cells) for key in ("stopped_at_cap", "stopped_at_floor"))
        lines += [
            "",
            f"Of the {runs} trained runs kept, {cap} stopped at the cap and {floor} at the floor "
            "(the cooldown begun at the first score the rule allows: two windows of `plateau_window` scores).",
        ]
    return "\n".join(lines)


def yes_no(value: bool) -> str:
    return "yes" if value else "NO"


def grid_edges_table(edges: dict) -> str:
    """Every learning-rate choice at an end of its grid, against one step past that end on the seeds that choose,
    then every probe's ridge at an end of its grid refitted with that grid one step wider
    (``benchmarks/grid_edges.py``): whether a wider grid would have kept the choice."""
    lines = ["| arm | per class | grid | chosen: val acc, loss | one step past: val acc, loss, kept / last step "
             "| the choice holds |", "|---|---|---|---|---|---|"]  # fmt: skip
    for run in edges["runs"]:
        chosen, past = run["chosen_val"], run["beyond_run"]
        grid = lr_list(run["grid"])
        lines.append(
            f"| {REGISTRY[run['arm']].label} | {run['n_train_per_class']} | {grid} | {run['chosen']:g}: "
            f"{chosen['val_acc']:.3f}, {chosen['val_loss']:.3f} | {run['beyond']:g}: {past['val_acc']:.3f}, "
            f"{past['val_loss']:.3f}, {past['best_step']} / {past['steps']} | {yes_no(run['choice_holds'])} |"
        )
    lines += ["", "| probe | per class | seed | ridge chosen: val acc | one step past | chosen from the wider grid: "
              "val acc | the choice holds |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for run in edges["ridge_runs"]:
        lines.append(
            f"| {REGISTRY[run['arm']].label} | {run['n_train_per_class']} | {run['seed']} | {run['chosen']:g}: "
            f"{run['chosen_val_acc']:.3f} | {run['beyond']:g} | {run['chosen_in_wider_grid']:g}: {run['val_acc']:.3f} "
            f"| {yes_no(run['choice_holds'])} |"
        )
    return "\n".join(lines)


def signed(value: float) -> str:
    return f"{value:+.3f}"


def ablation_table(ablation: dict) -> str:
    """Each weight-decay variant of seed 000's recipe: accuracy, collapse, loss and the weights' RMS."""
    lines = [
        "| variant | optimiser | test accuracy (mean ± std) | per seed | collapse | final train loss "
        "| weight RMS: start -> end | layer-0 attention RMS: start -> end |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for variant in ablation["order"]:
        r = ablation["variants"][variant]
        per_seed = ", ".join(f"{a:.3f}" for a in r["test_acc"]["per_seed"])
        lines.append(
            f"| `{variant}` | {DECAY_VARIANTS[variant].label} | **{mean_std(r['test_acc'])}** | {per_seed} "
            f"| {r['collapse']['mean']:.2f} | {r['train_loss']['mean']:.3f} "
            f"| {r['weight_rms_initial']['mean']:.4f} -> {r['weight_rms']['mean']:.5f} "
            f"| {r['attention0_rms_initial']['mean']:.4f} -> {r['attention0_rms']['mean']:.5f} |"
        )
    return "\n".join(lines)


def floor_table(floor: dict) -> str:
    """Each cell whose kept runs stopped at the plateau rule's floor, its first seed retrained under the committed
    and a lower floor (benchmarks/floor_check.py): the choice, its validation accuracy and steps, runs at the floor,
    and the chosen run's test accuracy change."""
    windows = floor["windows"]
    lines = [
        f"First seed, every learning rate of the grid, under windows of {windows['committed']} scores (committed) "
        f"and {windows['lower']} (lower floor), on one machine ({floor['runtime']}).",
        "",
        "| arm | per class | chosen lr: committed -> lower | its validation accuracy | its steps "
        "| runs at the floor | chosen run's test accuracy change |",
        "|---|---|---|---|---|---|---|",
    ]
    for cell in floor["cells"]:
        runs = [cell[which]["trials"][f"{cell[which]['lr']:g}"] for which in ("committed", "lower")]
        at_floor = [sum(t["at_floor"] for t in cell[which]["trials"].values()) for which in ("committed", "lower")]
        lines.append(
            f"| {REGISTRY[cell['arm']].label} | {cell['n_train_per_class']} | {cell['committed']['lr']:g} -> "
            f"{cell['lower']['lr']:g}{'' if cell['choice_holds'] else ' (moved)'} | {runs[0]['val_acc']:.3f} -> "
            f"{runs[1]['val_acc']:.3f} | {runs[0]['steps']} -> {runs[1]['steps']} | {at_floor[0]} -> {at_floor[1]} of "
            f"{len(cell['committed']['trials'])} | {signed(cell['test_change'])} |"
        )  # fmt: skip
    return "\n".join(lines)


def floor_rule_table(check: dict) -> str:
    """The candidate plateau rule (``plateau_score: accuracy``) against the one committed when the check ran (loss)
    in each floor cell (``benchmarks/floor_check.py --trend accuracy``): each rule's chosen rate, its mean
    validation accuracy over the choice seeds, their steps and how many ended at the floor; whether the candidate
    passes the rule written before the check ran, and the verdict. Validation only: no test score."""
    lines = [
        f"Choice seeds, every learning rate of the grid, validation only; {check['runtime']}. The candidate passes "
        f"in {check['passed']} of {check['of']} cells checked: **{check['verdict']}**.",
        "",
        "| arm | per class | then committed (loss): lr, validation accuracy, steps, at the floor | candidate "
        "(accuracy): lr, validation accuracy, steps, at the floor | allowed shortfall | passes |",
        "|---|---|---|---|---|---|",
    ]
    for cell in check["cells"]:
        rules = [cell[which] for which in ("committed", "candidate")]
        text = [f"{r['lr']:g}, {r['val_acc']:.3f}, {', '.join(str(s) for s in r['steps'])}, {r['at_floor']} of "
                f"{len(r['steps'])}" for r in rules]  # fmt: skip
        lines.append(f"| {REGISTRY[cell['arm']].label} | {cell['n_train_per_class']} | {text[0]} | {text[1]} | "
                     f"{cell['allowance']:.3f} | {yes_no(cell['passes'])} |")  # fmt: skip
    for cell in check["unchecked"]:
        lines.append(f"| {REGISTRY[cell['arm']].label} | {cell['n_train_per_class']} | not checked: {cell['why']} "
                     "| | | |")  # fmt: skip
    return "\n".join(lines)


def collapse_table(collapse: dict) -> str:
    """Seed 000's recipe and each change toward the protocol: test accuracy, collapse, steps, and the paired
    difference against seed 000's recipe with its 95% interval."""
    lines = [
        "| change | test accuracy (mean ± std) | collapse | steps | against seed 000's recipe (95% interval) |",
        "|---|---|---|---|---|",
    ]
    for name in collapse["order"]:
        r, d = collapse["runs"][name], collapse["against_seed"].get(name)
        against = f"{signed(d['mean'])} [{signed(d['low'])}, {signed(d['high'])}], {d['verdict']}" if d else "-"
        lines.append(f"| `{name}`: {collapse['changes'][name]['description']} | **{mean_std(r['test_acc'])}** "
                     f"| {r['collapse']['mean']:.2f} | {r['steps']['mean']:.0f} | {against} |")  # fmt: skip
    return "\n".join(lines)


def pretraining_table(scale: dict) -> str:
    """Few-shot test accuracy per pretraining size and shots, ViT against the small ResNet, with their pool test
    accuracy; the pixel probe and the masked-patch ViT below."""
    shots = sorted(scale["pixels"], key=int)
    per = " / ".join(shots)
    lines = [
        f"| pretraining images | ViT: {per} per class | small ResNet: {per} per class | pool test accuracy: ViT / "
        "ResNet |",
        "|---|---|---|---|",
    ]

    def row(values: dict) -> str:
        return " / ".join(f"{values[n]['mean']:.3f}" for n in shots)

    for size in sorted(scale["vit"], key=int):
        pool = scale["pool_test_acc"]
        lines.append(f"| {int(size):,} | {row(scale['vit'][size])} | {row(scale['resnet'][size])} | "
                     f"{pool['vit'][size]:.3f} / {pool['resnet'][size]:.3f} |")  # fmt: skip
    lines.append(f"| pixels (no pretraining) | {row(scale['pixels'])} | | |")
    sizes = {str(n): images for images, n in scale.get("vit_masked_patch_sizes", {}).items()}
    seen = {"all": "pool + target classes", "pool": "pool only"}
    for size, values in sorted(scale.get("vit_masked_patch", {}).items(), key=lambda item: int(item[0])):
        which = f" ({seen[sizes[size]]})" if size in sizes else ""
        lines.append(f"| ViT, masked patch prediction, {int(size):,} unlabeled images{which} | {row(values)} | | |")
    for size, values in scale.get("vit_masked_patch_long", {}).items():
        lines.append(f"| ViT, masked patch prediction, {int(size):,} unlabeled images, "
                     f"{scale['vit_masked_patch_long_epochs']} epochs (the stretch) | {row(values)} | | |")  # fmt: skip
    comparisons = scale.get("comparisons", {})
    if comparisons:
        lines += ["", f"Paired by seed (A - B, 95% t interval): {per} shots per class", "",
                  "| A - B | pretraining images | " + " | ".join(f"{n} shots" for n in shots) + " |",
                  "|---|---|" + "---|" * len(shots)]  # fmt: skip
        names = SCALE_NAMES
        for pair, by_key in comparisons.items():
            a, b = pair.split("-")
            for size in sorted({key.split("/")[0] for key in by_key}, key=int):
                cells = []
                for n in shots:
                    d = by_key[f"{size}/{n}"]
                    cells.append(f"{signed(d['mean'])} [{signed(d['low'])}, {signed(d['high'])}] {d['verdict']}")
                lines.append(f"| {names[a]} - {names[b]} | {int(size):,} | " + " | ".join(cells) + " |")
    if "slopes" in scale:
        lines += ["", slopes_table(scale)]
    decision = scale.get("decision")
    if decision:
        lines += ["", f"Pre-registered masked-patch decision: {'GO' if decision['go'] else 'NO-GO'} (validation "
                      f"{decision['masked_patch_val']:.3f} against the supervised ViT's "
                      f"{decision['supervised_val']:.3f}; rule: {decision['rule']})."]  # fmt: skip
    stretch = scale.get("stretch")
    if stretch:
        gap = stretch["difference"]
        lines += ["", f"Pre-registered stretch: {'SUCCESS' if stretch['success'] else 'NOT MET'} (test, "
                      f"{stretch['shots']} shots: {signed(gap['mean'])} [{signed(gap['low'])}, {signed(gap['high'])}] "
                      f"against the pixel probe; rule: {stretch['rule']})."]  # fmt: skip
    return "\n".join(lines)


SLOPE_WORDS = {"ahead": "rises", "behind": "falls", "level": "level"}


def slopes_table(scale: dict) -> str:
    """Each backbone's few-shot gain per decade of pretraining images and the ViT's minus the ResNet's
    (``pretraining_scale.json``'s ``slopes``), read against Figure 4's direction."""
    slopes = scale["slopes"]
    shots = sorted(slopes["vit"], key=int)
    sizes = sorted(scale["vit"], key=int)
    lines = [f"Gain per decade of pretraining images ({int(sizes[0]):,} to {int(sizes[-1]):,}): per seed, the "
             "least-squares slope of few-shot test accuracy on log10 of the pretraining images; mean over seeds and "
             "95% t interval. In Figure 4 the ViT's slope is above the ResNets', which is how it overtakes them.",
             "", "| gain per decade | " + " | ".join(f"{n} shots" for n in shots) + " |",
             "|---|" + "---|" * len(shots)]  # fmt: skip
    lines += slope_rows(slopes, shots)
    lines += ["", slopes_reading(scale)]
    return "\n".join(lines)


def slope_rows(slopes: dict, shots: list[str]) -> list[str]:
    """The rows of a gain-per-decade table (a ``slopes`` dict of ``headline.pretraining_slopes``): each backbone's
    slope (rises, falls or level) and the ViT's minus the ResNet's (ahead, behind or level)."""
    rows = []
    for key, name in (("vit", "ViT"), ("resnet", "small ResNet"), ("vit-resnet", "ViT - small ResNet")):
        cells = []
        for n in shots:
            d = slopes[key][n]
            word = d["verdict"] if "-" in key else SLOPE_WORDS[d["verdict"]]
            cells.append(f"{bracketed(d)} {word}")
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return rows


def slopes_reading(scale: dict) -> str:
    """One sentence: does the ViT gain more per decade than the ResNet (Figure 4's direction) at any shots?"""
    difference = scale["slopes"]["vit-resnet"]
    by_verdict: dict[str, list[str]] = {}
    for n in sorted(difference, key=int):
        by_verdict.setdefault(difference[n]["verdict"], []).append(n)

    def at(verdict: str) -> str:
        return ", ".join(
            f"{n} shots ({signed(difference[n]['mean'])} [{signed(difference[n]['low'])}, "
            f"{signed(difference[n]['high'])}])"
            for n in by_verdict.get(verdict, [])
        )

    parts = []
    if "ahead" in by_verdict:
        parts.append(f"the ViT gains more per decade than the small ResNet, Figure 4's direction, at {at('ahead')}")
    if "behind" in by_verdict:
        parts.append(
            f"the ViT gains less per decade than the small ResNet, the opposite of Figure 4's direction, at "
            f"{at('behind')}"
        )
    if "level" in by_verdict:
        parts.append(f"the two slopes are level at {', '.join(by_verdict['level'])} shots")
    return "Against Figure 4: " + "; ".join(parts) + "."


# the pretraining axis's arms, in its tables (metrics/pretraining_scale.json's keys)
SCALE_NAMES = {"vit": "ViT", "resnet": "small ResNet", "pixels": "pixels", "vit_masked_patch": "masked-patch ViT",
               "vit_masked_patch_pool": "masked-patch ViT, pool only",
               "vit_masked_patch_long": "masked-patch ViT, trained longer"}  # fmt: skip


def backbone_data_table(scale: dict) -> str:
    """The default masked-patch backbone (pool + the target classes' unlabeled training images) against its
    pool-only twin, through the same few-shot probe: what the target images add, paired by seed."""
    sizes = scale.get("vit_masked_patch_sizes")
    if not sizes:
        return "Not measured: metrics/pretraining_scale.json has no pool-only masked-patch backbone."
    everything, pool = str(sizes["all"]), str(sizes["pool"])
    gain = scale["comparisons"]["vit_masked_patch-vit_masked_patch_pool"]
    lines = [
        f"| few-shot probe, images per class | pool + target images ({int(everything):,}) | pool only "
        f"({int(pool):,}) | difference, 95% t interval |",
        "|---|---|---|---|",
    ]
    for n in sorted(scale["pixels"], key=int):
        d = gain[f"{everything}/{n}"]
        lines.append(f"| {n} | {mean_std(scale['vit_masked_patch'][everything][n])} | "
                     f"{mean_std(scale['vit_masked_patch'][pool][n])} | {signed(d['mean'])} [{signed(d['low'])}, "
                     f"{signed(d['high'])}] {d['verdict']} |")  # fmt: skip
    return "\n".join(lines)


def side_by_side(runs: dict) -> str:
    """A comparison's cells in both runs: each interval and verdict, whether the verdicts agree and the
    intervals overlap (a row of ``precision_change.json``)."""
    cells = [f"{signed(r['mean'])} [{signed(r['low'])}, {signed(r['high'])}] {r['verdict']}"
             for r in (runs["reference"], runs["other"])]  # fmt: skip
    same, overlap = (yes_no(runs[key]) for key in ("same_verdict", "overlap"))
    return f"{cells[0]} | {cells[1]} | {same} | {overlap}"


def lr_list(lrs: list[float]) -> str:
    return ", ".join(f"{lr:g}" for lr in lrs)


def grouped_by_value(by_size: dict[str, dict]) -> list[tuple[dict, list[str]]]:
    """``{size: value}`` -> ``[(value, [sizes...])]``, sizes with equal values together, in size order."""
    groups: list[tuple[dict, list[str]]] = []
    for size in sorted(by_size, key=int):
        match = next((group for group in groups if group[0] == by_size[size]), None)
        if match:
            match[1].append(size)
        else:
            groups.append((by_size[size], [size]))
    return groups


def curve_rows(change: dict):
    """A second run's curve comparisons (``precision_change.json``'s ``comparisons``) in size order: each row's
    two arm labels, its size and both runs' cells."""
    for n, pairs in sorted(change["comparisons"].items(), key=lambda item: int(item[0])):
        for pair, runs in pairs.items():
            a, b = (REGISTRY[arm].label for arm in pair.split("-"))
            yield a, b, n, runs


def precision_table(change: dict) -> str:
    """Each stated comparison of the curve in the committed run and in a second run in another precision: the
    verdicts and 95% intervals side by side (``metrics/precision_change.json``); where the second run was a
    full one, the pretraining axis's comparisons too, and seed 000's and the collapse study's means."""
    reference, other = (" and ".join(change["runtime"][run]) for run in ("reference", "other"))
    lines = [
        f"Committed run: {reference}. Second run: {other}. {change['held']} of {change['compared']} comparisons "
        "keep their verdict with overlapping intervals.",
        "",
        "| A - B | per class | committed run | second run | same verdict | intervals overlap |",
        "|---|---|---|---|---|---|",
    ]
    if change.get("grids"):
        grids = "; ".join(f"{REGISTRY[arm].label} at {', '.join(sizes)} per class: {lr_list(runs['reference'])} in "
                          f"the committed run, {lr_list(runs['other'])} in the second"
                          for arm, by_size in change["grids"].items()
                          for runs, sizes in grouped_by_value(by_size))  # fmt: skip
        lines[1:1] = ["", f"Learning-rate grids that differ (the second run is older than the grid): {grids}."]
    lines += [f"| {a} - {b} | {n} | {side_by_side(runs)} |" for a, b, n, runs in curve_rows(change)]
    if "pretraining" in change:
        lines += precision_pretraining_rows(change["pretraining"])
    labels = {arm: REGISTRY[arm].label for arm in ("scratch", "linear")} | {k: f"`{k}`" for k in DECAY_VARIANTS}
    for name, title in (("seed000", "Seed 000's two arms"), ("ablation", "The collapse study")):
        if name in change:
            means = ", ".join(f"{labels.get(key, key)} {m['reference']:.3f} -> {m['other']:.3f}"
                              for key, m in change[name].items())  # fmt: skip
            lines += ["", f"{title}, mean test accuracy, committed run -> second run: {means}."]
    return "\n".join(lines)


def replication_table(change: dict, reference_name: str = "committed run") -> str:
    """Each stated comparison of the curve in the committed run (or the run ``reference_name`` names, the one it
    was held against) and in the replication with fresh seeds (issue 37: new subsets and backbones), with the
    pooled interval over both runs' seeds beside them (``comparison.json`` in its folder), and how many
    verdicts held, moved and flipped."""
    reference, other = (" and ".join(change["runtime"][run]) for run in ("reference", "other"))
    held, compared, flipped = change["held"], change["compared"], change["flipped"]
    name = reference_name[0].upper() + reference_name[1:]
    lines = [
        f"{name}: {reference}. Replication: {other}. {held} of {compared} comparisons keep their verdict with "
        f"overlapping intervals; {compared - held} do not, {flipped} of them flipping between ahead and behind. The "
        f"learning rate chosen is the same in {change['same_learning_rate']} arm-by-size cells.",
        "",
        f"| A - B | per class | {reference_name} | replication (fresh seeds) | same verdict | intervals overlap "
        "| pooled over both runs' seeds |",
        "|---|---|---|---|---|---|---|",
    ]
    for a, b, n, runs in curve_rows(change):
        pooled = runs["pooled"]
        lines.append(f"| {a} - {b} | {n} | {side_by_side(runs)} | {signed(pooled['mean'])} "
                     f"[{signed(pooled['low'])}, {signed(pooled['high'])}] {pooled['verdict']} |")  # fmt: skip
    return "\n".join(lines)


def replication_answer(change: dict, target_share: float = 0.9) -> str:
    """The README's line on the replication with fresh seeds: how many of the curve's verdicts held, whether issue
    37's target (at least ``target_share`` of them held, none flipped between ahead and behind) is met, and each
    verdict that moved, from its verdict in the committed run to the replication's."""
    held, compared, flipped = change["held"], change["compared"], change["flipped"]
    met = held >= target_share * compared and flipped == 0
    moved = [f"{a} - {b} at {n}: {runs['reference']['verdict']} -> {runs['other']['verdict']}"
             + ("" if runs["overlap"] else ", intervals apart")
             for a, b, n, runs in curve_rows(change) if not (runs["same_verdict"] and runs["overlap"])]  # fmt: skip
    return (
        f"It kept {held} of {compared} of the curve's verdicts with overlapping intervals, {flipped} flipping between "
        f"ahead and behind: issue 37's target (at least {target_share:.0%} held, none flipped) is "
        f"{'met' if met else 'NOT met'}. "
        + (f"Moved ({len(moved)}, per class): {'; '.join(moved)}. " if moved else "")
        + f"The learning rate chosen is the same in {change['same_learning_rate']} arm-by-size cells."
    )


def cross_kind_table(change: dict, n_val: int, names: tuple[str, str] = ("committed run", "this run")) -> str:
    """The committed curve's sweeps that another CPU kind or precision ran, run again on this one with the same
    seeds and code (``metrics/rerun_cpu/comparison.json``; the loss rule's run's in
    ``metrics/run_before_accuracy_rule/rerun_cpu/``): each cell's chosen learning rate in both runs, with its
    margin (the chosen rate's mean validation accuracy over the choice seeds minus the runner-up's) beside the
    standard error of one validation accuracy on ``n_val`` images; then the comparisons both runs hold. ``names``
    are the reference run's and the other's, for a second run that is not a rerun of the committed one."""
    reference, other = (" and ".join(change["runtime"][run]) for run in ("reference", "other"))
    cells = [(arm, n, c) for arm, by_size in change["learning_rates"].items() for n, c in by_size.items()]
    cells.sort(key=lambda cell: (TABLE_ORDER.index(cell[0]), int(cell[1])))
    first, second = names
    lines = [
        f"{first[0].upper()}{first[1:]}: {reference}. {second[0].upper()}{second[1:]}: {other}. The learning rate "
        f"chosen is the same in {change['same_learning_rate']} cells; {change['held']} of {change['compared']} "
        f"comparisons keep their verdict with overlapping intervals, {change['flipped']} flipping between ahead and "
        "behind.",
        "",
        f"Margins are in points of validation accuracy, over {n_val:,} images, where one accuracy's standard error is "
        f"at most {largest_se_points(n_val):.1f} points.",
        "",
        f"| arm | per class | {first}: lr (margin) | {second}: lr (margin) | same lr |",
        "|---|---|---|---|---|",
    ]
    for arm, n, cell in cells:
        runs = [f"{cell[run]:g} ({100 * cell['margin'][run]:.2f})" for run in ("reference", "other")]
        lines.append(f"| {REGISTRY[arm].label} | {n} | {runs[0]} | {runs[1]} | {yes_no(cell['same'])} |")
    if change["compared"]:
        lines += ["", f"| A - B | per class | {first} | {second} | same verdict | intervals overlap |",
                  "|---|---|---|---|---|---|"]  # fmt: skip
        lines += [f"| {a} - {b} | {n} | {side_by_side(runs)} |" for a, b, n, runs in curve_rows(change)]
    return "\n".join(lines)


def largest_se_points(n_val: int) -> float:
    """One validation accuracy's binomial standard error on ``n_val`` images at its largest (p = 0.5), in points."""
    return 100 * (0.25 / n_val) ** 0.5


def cross_kind_answer(change: dict, n_val: int) -> str:
    """The README's line on the cross-kind rerun: how many cells chose the same learning rate, per arm, and how
    far apart the candidates were where the choice moved (both runs' margins, beside one accuracy's standard
    error on ``n_val`` validation images); then how many of the verdicts both runs hold kept theirs."""
    by_arm = sorted(change["learning_rates"].items(), key=lambda item: TABLE_ORDER.index(item[0]))
    arms = ", ".join(f"{REGISTRY[arm].label} in {sum(c['same'] for c in cells.values())} of {len(cells)}"
                     for arm, cells in by_arm)  # fmt: skip
    moved = [100 * m for cells in change["learning_rates"].values() for c in cells.values() if not c["same"]
             for m in c["margin"].values()]  # fmt: skip
    where = (f"; where the rate moved, the two runs' margins (the choice's mean validation accuracy over the "
             f"runner-up's) were {min(moved):.2f} to {max(moved):.2f} points, against a standard error of one "
             f"accuracy of at most {largest_se_points(n_val):.1f}" if moved else "")  # fmt: skip
    verdicts = (
        f" Of the {change['compared']} verdicts both runs hold, {change['held']} kept theirs with overlapping "
        f"intervals and {change['flipped']} flipped between ahead and behind."
        if change.get("compared")
        else ""
    )
    return f"They chose the same learning rate in {change['same_learning_rate']} cells ({arms}){where}.{verdicts}"


def precision_pretraining_rows(pretraining: dict) -> list[str]:
    """The pretraining axis's paired comparisons in both runs (``precision_change.json``'s ``pretraining``)."""
    held, compared = pretraining["held"], pretraining["compared"]
    lines = [
        "",
        f"The pretraining-size axis: {held} of {compared} comparisons keep their verdict with overlapping intervals.",
        "",
        "| A - B | pretraining images / shots | committed run | second run | same verdict | intervals overlap |",
        "|---|---|---|---|---|---|",
    ]
    for pair, by_key in pretraining["comparisons"].items():
        a, b = (SCALE_NAMES[name] for name in pair.split("-"))
        for key, runs in sorted(by_key.items(), key=lambda item: tuple(map(int, item[0].split("/")))):
            images, shots = key.split("/")
            lines.append(f"| {a} - {b} | {int(images):,} / {shots} | {side_by_side(runs)} |")
    return lines


def ran_on(runtime: str) -> str:
    """A run's device, precision and CPU kind from its ``runtime`` field, e.g. "cpu bf16 (AVX512, native bf16: ...)"
    -> "cpu bf16, AVX512": the study's backbones ran on more than one machine kind."""
    where, _, hardware = runtime.partition(" (")
    return f"{where}, {hardware.split(',')[0].rstrip(')')}" if hardware else where


def synthetic_table(pretrained: list[dict], finetuned: list[dict], study: dict | None, items: int) -> str:
    """Issue 38's study as far as it has run (``metrics/synthetic/``: one pretraining and one fine-tuning file per
    backbone), and, once every backbone has run, the pre-registered hypotheses (``metrics/synthetic.json``)."""
    tuned = {(item["arch"], item["n_pretrain"]): item for item in finetuned}
    names = {"vit": "ViT", "resnet": "small ResNet"}
    shots = sorted(pretrained[0]["few_shot"], key=int) if pretrained else []
    sizes = sorted(tuned[next(iter(tuned))]["finetune"], key=int) if tuned else []
    lines = [
        f"{len(pretrained)} of {items} backbones pretrained, {len(finetuned)} fine-tuned. Test accuracy on the "
        "target, mean ± std over the curve's seeds.",
        "",
        "| backbone | synthetic images | ran on | held-out synthetic accuracy (step) | "
        + " | ".join(f"{s}-shot probe" for s in shots)
        + " | "
        + " | ".join(f"fine-tuned at {n} per class" for n in sizes)
        + " |",
        "|---|---|---|---|" + "---|" * (len(shots) + len(sizes)),
    ]
    for item in sorted(pretrained, key=lambda item: (item["arch"] != "vit", item["n_pretrain"])):
        done = tuned.get((item["arch"], item["n_pretrain"]))
        used = "" if item["used"] else ", not used"
        cells = [mean_std(item["few_shot"][s]) for s in shots]
        cells += [mean_std(done["finetune"][n]["test_acc"]) if done else "not yet" for n in sizes]
        held_out = f"{item['held_out_acc']:.3f} ({item['best_step']}{used})"
        lines.append(f"| {names[item['arch']]} | {item['n_pretrain']:,} | {ran_on(item['runtime'])} | {held_out} | "
                     + " | ".join(cells) + " |")  # fmt: skip
    if study is None:
        lines += ["", "H1-H3 are tested once every backbone has run (stage synthetic_scale, `metrics/synthetic.json`)."]
        return "\n".join(lines)
    lines += ["", "| hypothesis | what is tested | difference [95% interval] | pre-registered verdict | after Holm |",
              "|---|---|---|---|---|"]  # fmt: skip
    for name, hypothesis in study["hypotheses"].items():
        lines.append(f"| {name} | {hypothesis['rule']} | {bracketed(hypothesis['difference'])} "
                     f"| {'MET' if hypothesis['met'] else 'NOT MET'} | "
                     f"{'MET' if hypothesis['met_under_holm'] else 'NOT MET'} |")  # fmt: skip
    slopes = study["slopes"]
    span = sorted(item["n_pretrain"] for item in pretrained)
    lines += ["", f"Gain per decade of synthetic images ({span[0]:,} to {span[-1]:,}), as H1 defines it: per seed, "
              "the least-squares slope of the probe's test accuracy on log10(images); mean over seeds, 95% t "
              f"interval. H1 tests the {study['primary_shots']}-shot column of the last row; the others are "
              "reported, not tested.",
              "", "| gain per decade | " + " | ".join(f"{s} shots" for s in shots) + " |",
              "|---|" + "---|" * len(shots)]  # fmt: skip
    lines += slope_rows(slopes, shots)
    lines += ["", "Fine-tuned backbone minus the small ResNet from scratch on the same images, paired by seed (H3 is "
              "the ViT's row at the largest size, 75 per class):", "",
              "| backbone | synthetic images | " + " | ".join(f"{n} per class" for n in sizes) + " |",
              "|---|---|" + "---|" * len(sizes)]  # fmt: skip
    for arch in ("vit", "resnet"):
        for images, by_n in sorted(study["finetune_against_cnn"][arch].items(), key=lambda item: int(item[0])):
            lines.append(f"| {names[arch]} | {int(images):,} | "
                         + " | ".join(f"{bracketed(by_n[n])} {by_n[n]['verdict']}" for n in sizes) + " |")  # fmt: skip
    return "\n".join(lines)


def bracketed(difference: dict) -> str:
    """A paired difference as "+0.010 [-0.020, +0.040]"."""
    return f"{signed(difference['mean'])} [{signed(difference['low'])}, {signed(difference['high'])}]"


def synthetic_answer(study: dict | None, pretrained: int, items: int, sizes: list[int]) -> str:
    """The README's line on issue 38's study: each pre-registered hypothesis with its interval and verdict once
    the study has run (``metrics/synthetic.json``), else how far it has come."""
    what = (f"- **Synthetic pretraining two decades further** (issue 38's opt-in study, docs/synthetic.md: the ViT "
            f"and the small ResNet pretrained on {min(sizes):,} to {max(sizes):,} fractal images)")  # fmt: skip
    if study is None:
        ran = f"{pretrained} of {items} backbones have run"
        return f"{what}: {ran}; its pre-registered hypotheses are tested once all have."
    verdicts = "; ".join(
        f"{name}, {h['rule'].split(': MET if')[0]}: {bracketed(h['difference'])}, {'MET' if h['met'] else 'NOT MET'}"
        for name, h in study["hypotheses"].items()
    )
    shots = str(study["primary_shots"])
    vit, resnet = (study["slopes"][arch][shots] for arch in ("vit", "resnet"))
    plainly = (f"{max(sizes) // min(sizes):,} times more pretraining images moved the ViT's {shots}-shot probe by "
               f"{bracketed(vit)} per decade and the small ResNet's by {bracketed(resnet)}")  # fmt: skip
    return f"{what}: {plainly}. {verdicts} (paired by seed, 95% interval; pre-registered before the first full run)."
