"""Prints the README's results tables (markdown) from the committed metrics: `python -m pipeline.tools.report`
(or `vit-report`, or `make results`).

The headline table comes from metrics/evaluate.json (seed 000's two arms, then the protocol's arms at the
headline size), the data-hunger curve and its runs from metrics/data_hunger.json, and the collapse studies
from metrics/ablation.json and metrics/collapse.json.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from pipeline.core import paths
from pipeline.core.entry import stage_main, tool_parser
from pipeline.core.errors import UserError
from pipeline.core.files import read_json, write_text
from pipeline.core.params_yaml import load_params
from pipeline.results.report_tables import (
    ablation_table,
    backbone_data_table,
    collapse_table,
    cross_kind_answer,
    cross_kind_table,
    curve_table,
    floor_rule_table,
    floor_table,
    grid_edges_table,
    precision_table,
    pretraining_table,
    replication_answer,
    replication_table,
    results_table,
    runs_table,
    synthetic_answer,
    synthetic_table,
)
from pipeline.results.synthetic_axis import ARCHES
from pipeline.results.verdicts import SECOND_RUNS, answer, comparisons_table, readings, verdict_table


def read_metrics(name: str) -> dict:
    path = paths.METRICS / name
    if not path.is_file():
        raise UserError(f"{path} is missing; run `dvc repro` (or `dvc pull`) first")
    return read_json(path)


def generated_blocks() -> dict[str, str]:
    """Every generated table, by the marker name it has in README.md and docs/results.md."""
    metrics, curve = read_metrics("evaluate.json"), read_metrics("data_hunger.json")
    ablation, comparisons = read_metrics("ablation.json"), read_metrics("comparisons.json")
    scale, second_runs = read_metrics("pretraining_scale.json"), {file: read_metrics(file) for file in SECOND_RUNS}
    collapse = read_metrics("collapse.json")
    cross_kind = read_metrics("run_before_accuracy_rule/rerun_cpu/comparison.json")  # the loss rule's run's check
    committed_cross_kind = read_metrics("rerun_cpu/comparison.json")  # the committed run's, as far as it has run
    replication = second_runs["replication/comparison.json"]  # the committed run's, with fresh seeds
    named_runs = {name: second_runs[file] for file, name in SECOND_RUNS.items()}
    return {
        "answer": answer(metrics, curve, comparisons, named_runs, scale, collapse),
        "verdicts": verdict_table(comparisons, named_runs),
        "headline": results_table(metrics),
        "curve": (f"Test accuracy ({curve['n_test']} test images), mean ± std over {len(comparisons['seeds'])} seeds, "
                  f"each seed its own nested subsets; trained arms chosen on {curve['n_val']} validation images.\n\n"
                  + curve_table(curve)),
        "comparisons": comparisons_table(comparisons),
        "readings": readings(comparisons, named_runs),
        "pretraining": pretraining_table(scale),
        "backbone_data": backbone_data_table(scale),
        "precision": precision_table(second_runs["precision_change.json"]),
        "precision_zen4": precision_table(second_runs["precision_change_zen4.json"]),
        # the fresh-seed replications (issue 37), each held verdict by verdict against the run it replicates
        "replication": replication_table(replication, reference_name="the committed run"),
        "replication_answer": replication_answer(replication),
        "replication_loss_rule": replication_table(
            second_runs["run_before_accuracy_rule/replication/comparison.json"], reference_name="the rerun (loss rule)"
        ),
        "runs": runs_table(curve),
        "grid_edges": grid_edges_table(read_metrics("grid_edges.json")),
        "floor": floor_table(read_metrics("floor_check.json")),
        # issue 37's targets: the floor's candidate rule, and the choices on another CPU kind (same seeds)
        "floor_rule": floor_rule_table(read_metrics("floor_rule.json")),
        # the rerun's sweeps on another CPU kind: held against the rerun, the loss rule's run before the committed one
        "cross_kind": cross_kind_table(cross_kind, curve["n_val"], names=("the rerun (loss rule)", "this run")),
        "cross_kind_answer": cross_kind_answer(cross_kind, curve["n_val"]),
        "committed_cross_kind": cross_kind_table(committed_cross_kind, curve["n_val"],
                                                 names=("the committed run", "this run")),
        "committed_cross_kind_answer": cross_kind_answer(committed_cross_kind, curve["n_val"]),
        # issue 37's accuracy floor rule: the committed run held against the loss rule's run before it (same seeds)
        "adopted_rule": cross_kind_table(
            read_metrics("run_before_accuracy_rule/adopted_against_it.json"), curve["n_val"],
            names=("the loss rule's run (the rerun)", "the accuracy rule's run (committed)"),
        ),
        "collapse": (f"ViT from scratch on {collapse['n_train']} images ({collapse['n_train_per_class']} per class), "
                     f"{len(collapse['seeds'])} seeds; the protocol's lr {collapse['protocol_lr']:g}, chosen on "
                     f"validation by the curve at this size.\n\n" + collapse_table(collapse)),
        "ablation": (f"ViT from scratch on {ablation['n_train']} images, {ablation['epochs']} epochs at lr "
                     f"{ablation['lr']:g}.\n\n" + ablation_table(ablation)),
        **synthetic_study(),
    }  # fmt: skip


def synthetic_study() -> dict[str, str]:
    """Issue 38's opt-in study: the committed files of the backbones it has run so far, its hypotheses once all
    have (``synthetic`` in docs/synthetic.md, ``synthetic_answer`` in the README)."""
    folder = paths.METRICS / "synthetic"
    pretrained = [read_json(path) for path in sorted(folder.glob("pretrain_*.json"))]
    finetuned = [read_json(path) for path in sorted(folder.glob("finetune_*.json"))]
    path = paths.METRICS / "synthetic.json"
    study = read_json(path) if path.is_file() else None
    cfg = load_params().synthetic
    items, sizes = len(cfg.points) * len(ARCHES), [cfg.categories * n for n in cfg.per_category]
    return {
        "synthetic": synthetic_table(pretrained, finetuned, study, items),
        "synthetic_answer": synthetic_answer(study, len(pretrained), items, sizes),
    }


MARKER = re.compile(r"(<!-- generated: (\w+) -->\n)(.*?)(<!-- /generated: \2 -->)", re.DOTALL)
# the files whose tables between markers `--write` regenerates
DOCUMENTS = ("README.md", "docs/results.md", "docs/reproducibility.md", "docs/synthetic.md")


def fill(text: str, blocks: dict[str, str]) -> str:
    """``text`` with every ``<!-- generated: NAME -->`` ... ``<!-- /generated: NAME -->`` block replaced by
    ``blocks[NAME]``.

    Raises:
        UserError: a marker names no known table.
    """

    def replace(match: re.Match) -> str:
        name = match.group(2)
        if name not in blocks:
            raise UserError(f"unknown generated table {name!r}; known: {', '.join(sorted(blocks))}")
        return match.group(1) + blocks[name] + "\n" + match.group(4)

    return MARKER.sub(replace, text)


def parse_args(argv: list[str]) -> argparse.Namespace:
    """``--write`` fills the README's and docs/results.md's generated tables; ``--check`` fails where they differ."""
    parser = tool_parser("pipeline.tools.report", __doc__)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", action="store_true", help="rewrite the tables between the markers in "
                       + " and ".join(DOCUMENTS))  # fmt: skip
    group.add_argument("--check", action="store_true", help="exit 1 where a committed table differs from the metrics")
    return parser.parse_args(argv)


@stage_main
def main() -> None:
    args = parse_args(sys.argv[1:])
    blocks = generated_blocks()
    if not (args.write or args.check):
        for name, block in blocks.items():
            print(f"<!-- generated: {name} -->\n{block}\n<!-- /generated: {name} -->\n")
        return
    stale = []
    for document in map(Path, DOCUMENTS):
        if not document.is_file():
            continue
        text = document.read_text()
        filled = fill(text, blocks)
        if filled != text:
            stale.append(str(document))
            if args.write:
                write_text(document, filled)
    if args.check and stale:
        raise UserError(f"the generated tables in {', '.join(stale)} differ from metrics/; run `make results-write`")
    print(("rewrote " if args.write else "up to date: ") + (", ".join(stale) or ", ".join(DOCUMENTS)))


if __name__ == "__main__":
    main()
