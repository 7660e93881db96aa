"""benchmarks/grid_edges.py: one step past an edge of the 1-3-10 learning-rate sequence, and the table it feeds."""

import json
from pathlib import Path

import pytest
from helpers import benchmark_module

from pipeline.results.report_tables import grid_edges_table

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def grid_edges():
    return benchmark_module("grid_edges")


@pytest.mark.parametrize(("lr", "side", "expected"), [
    (0.003, "high", 0.01), (0.01, "high", 0.03), (0.0003, "high", 0.001), (0.001, "high", 0.003),
    (0.0003, "low", 0.0001), (0.0001, "low", 0.00003), (0.001, "low", 0.0003), (0.00003, "low", 0.00001),
])  # fmt: skip
def test_one_step_past_an_edge_follows_the_grids_sequence(grid_edges, lr, side, expected):
    assert grid_edges.beyond(lr, side) == pytest.approx(expected, rel=1e-9)


def test_every_committed_edge_choice_is_found_and_every_grid_is_the_sequence(grid_edges):
    """The points the check runs are exactly those whose committed choice is flagged at an edge, and each
    committed grid is consecutive values of the sequence, so "one step past" is the grid's next value."""
    edges = grid_edges.edge_points(folder=ROOT / "metrics" / "data_hunger")
    flagged = set()
    for path in (ROOT / "metrics" / "data_hunger").glob("*.json"):
        point = json.loads(path.read_text())
        if point.get("lr_at_edge"):
            flagged.add((point["arm"], point["point"]))
        if "lr_trials" in point:
            indices = sorted(grid_edges.grid_index(float(lr)) for lr in point["lr_trials"])
            assert indices == list(range(indices[0], indices[0] + len(indices))), path.name
    assert {(p["arm"], p["point"]) for p in edges} == flagged


def test_the_committed_check_covers_every_edge_choice_and_says_whether_it_holds(grid_edges):
    committed = json.loads((ROOT / "metrics" / "grid_edges.json").read_text())
    # the check was made on issue 37's rerun, the committed point files
    points = ROOT / "metrics" / "data_hunger"
    edges = grid_edges.edge_points(folder=points)
    assert {(r["arm"], r["point"], r["chosen"]) for r in committed["runs"]} == {
        (p["arm"], p["point"], p["lr"]) for p in edges}  # fmt: skip
    ridges = {(p["arm"], p["point"], p["reg"][i]) for p, i in grid_edges.ridge_edges(points)}
    assert {(r["arm"], r["point"], r["chosen"]) for r in committed["ridge_runs"]} == ridges
    table = grid_edges_table(committed).splitlines()
    assert len(table) == 2 + len(committed["runs"]) + 3 + len(committed["ridge_runs"])
    failed = committed["of"] - committed["holds"] + committed["ridge_of"] - committed["ridge_holds"]
    assert sum(line.endswith("| NO |") for line in table) == failed


def trial(mean: float, *per_seed: float, pruned: bool = False) -> dict:
    return {"val_acc": mean, "val_loss": 1.0, "pruned": pruned,
            "seeds": {str(seed): {"val_acc": acc, "val_loss": 1.0} for seed, acc in enumerate(per_seed)}}  # fmt: skip


# the small ResNet at 10 per class in issue 37's rerun: 0.03 chosen at the top of its grid, on seeds 0-2
EDGE_POINT = {"lr": 0.03, "n_val": 1500, "lr_trials": {
    "0.001": trial(0.40, 0.40, pruned=True), "0.003": trial(0.55, 0.56, 0.55, 0.54),
    "0.01": trial(0.57, 0.57, 0.58, 0.56), "0.03": trial(0.58, 0.58, 0.58, 0.58)}}  # fmt: skip


def score(acc: float) -> dict:
    return {"val_acc": acc, "val_loss": 1.0, "best_step": 100, "steps": 230}


@pytest.mark.parametrize(("first", "rest", "chosen", "was_pruned"), [
    (0.60, [0.60, 0.60], 0.1, False),  # better on every choice seed: the wider grid chooses the new value
    (0.59, [0.55, 0.55], 0.03, False),  # better on seed 0 alone: the mean keeps the edge
    (0.40, [], 0.03, True),  # far behind on seed 0: pruned there, as the sweep would
])  # fmt: skip
def test_the_wider_grid_chooses_by_the_sweeps_own_rule(grid_edges, first, rest, chosen, was_pruned):
    from pipeline.arms.protocol import Choice

    choice = Choice(seeds=3, prune_z=3.0, n_val=1500)
    runs = [score(first), *(score(acc) for acc in rest)]
    assert grid_edges.wider_grid_choice(EDGE_POINT, 0.1, runs, [0, 1, 2], choice) == (chosen, was_pruned)


def test_the_new_value_trains_the_later_choice_seeds_only_when_pruning_lets_it_past_the_first(grid_edges):
    from pipeline.arms.protocol import Choice

    class Arm:
        def __init__(self, accuracy: float):
            self.accuracy, self.seeds = accuracy, []

        def run_seed(self, curve, data, seed, lr):
            self.seeds.append(seed)
            return score(self.accuracy) | {"score": lambda: pytest.fail("the test set was scored")}

    choice = Choice(seeds=3, prune_z=3.0, n_val=1500)
    close, far = Arm(0.58), Arm(0.40)
    assert len(grid_edges.beyond_runs(close, None, {}, EDGE_POINT, 0.1, [0, 1, 2], choice)) == 3
    assert len(grid_edges.beyond_runs(far, None, {}, EDGE_POINT, 0.1, [0, 1, 2], choice)) == 1
    assert (close.seeds, far.seeds) == ([0, 1, 2], [0])
    assert grid_edges.summary_run([score(0.5), score(0.6)]) == pytest.approx(
        {"val_acc": 0.55, "val_loss": 1.0, "best_step": "100, 100", "steps": "230, 230"})  # fmt: skip


@pytest.mark.parametrize(("asked", "committed", "retrained"), [
    (None, "cpu bf16", False),  # no flag: nothing retrained
    ([], "cpu bf16", True),  # the flag alone: every point committed in another precision or CPU kind
    ([], "cpu fp32", False),  # ... and none committed in this machine's
    (["cnn:0"], "cpu fp32", True),  # named: retrained whatever its precision
    (["cnn:1"], "cpu bf16", False),
])  # fmt: skip
def test_the_edge_value_is_retrained_where_its_committed_runs_came_from_another_precision(
    grid_edges, asked, committed, retrained
):
    assert grid_edges.same_precision(asked, "cnn:0", committed, "cpu fp32") is retrained


def test_the_same_precision_check_keeps_the_edge_only_where_it_still_beats_the_new_value(grid_edges):
    """The edge trained here lower than its committed bf16 score: the new value, behind that committed score,
    may still beat the edge in the same precision."""
    edge_here, beyond_here = [score(0.55), score(0.56)], [score(0.57), score(0.57)]
    check = grid_edges.same_precision_check(0.03, edge_here, 0.1, beyond_here, [0, 1])
    assert check["same_precision_holds"] is False and check["same_precision_seeds"] == [0, 1]
    assert check["same_precision_edge_run"]["val_acc"] == pytest.approx(0.555)
    assert grid_edges.same_precision_check(0.03, beyond_here, 0.1, edge_here, [0, 1])["same_precision_holds"]
    tie = grid_edges.same_precision_check(0.0003, [score(0.6)], 0.0001, [score(0.6)], [0])
    assert tie["same_precision_holds"] is False  # of equals the sweeps keep the smaller rate


def test_the_check_builds_the_curve_with_the_sweeps_backbones(grid_edges):
    """Issue 37's transfer arms probe and fine-tune seed i on backbone i mod 3; a check built with one backbone
    retrained seeds 1 and 2 on backbone 0's features and disagreed with the committed probes."""
    from pipeline.core.params_yaml import load_params

    params = load_params(ROOT / "params.yaml")
    assert params.backbone_count == 3
    assert grid_edges.sweep_curve(params, runtime=None).backbones == params.backbone_count


@pytest.mark.parametrize("content", [None, "{not json", '{"holds": 1}'])
def test_a_missing_or_foreign_beyond_from_file_ends_in_one_message(grid_edges, tmp_path, capsys, content):
    import argparse

    path = tmp_path / "earlier.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(SystemExit) as stop:
        grid_edges.read_earlier(argparse.ArgumentParser(prog="grid_edges.py"), path)
    assert stop.value.code == 2 and "--beyond-from" in capsys.readouterr().err
    path.write_text('{"runs": [], "reproduced": []}')
    assert grid_edges.read_earlier(argparse.ArgumentParser(), path)["runs"] == []
