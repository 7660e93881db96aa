"""What the arms share on the data-hunger curve: the values they read, a point's data, and one run."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from pipeline.core import paths
from pipeline.core.config import DataHungerConfig
from pipeline.data.images import ImageSet, batch_preparer, load_split
from pipeline.data.subsets import MONITOR_KEY, seed_subset, sweep_sizes, sweep_train_set, val_set
from pipeline.models.probe import Probe
from pipeline.results.stats import spread
from pipeline.train.ddp import from_rank_zero
from pipeline.train.loop import Recording, count_parameters, evaluate
from pipeline.train.plateau import Stopping, better_score, train_until_plateau
from pipeline.train.runtime import Runtime, seed_everything
from pipeline.train.schedule import Recipe


@dataclass(frozen=True)
class Curve:
    """What an arm's curve runs read, picked out of params.yaml once by the stage that runs them."""

    preset: str  # offline | paper: where the training images come from and how sizes are read
    model_name: str  # the from-scratch arms' ViT preset
    backbone_model: str  # the pretrained backbone's ViT preset
    backbone_source: str  # supervised | masked_patch (offline.backbone)
    config: DataHungerConfig  # sizes, the validation rule, batch size and each arm's optimiser
    eval_batch_size: int
    runtime: Runtime
    backbones: int = 1  # the transfer arms' pretrained backbones: seed i uses backbone i mod backbones


@dataclass(frozen=True)
class Point:
    """One size of the curve as an arm's runs read it: what every seed draws from and is scored on. The probe
    arms add the features of validation and test (and the linear arm its backbone) with ``dataclasses.replace``,
    once per point."""

    n: int | None  # training images per class (None: every image, the paper preset's whole train folder)
    num_classes: int
    pool: ImageSet  # every seed's nested subsets are drawn from it
    val: ImageSet
    test: ImageSet
    prepare: Callable  # training batches: augmented where the arm augments
    score: Callable  # evaluation batches: never augmented
    backbone: nn.Module | None = None  # the frozen pretrained ViT (linear, finetune)
    val_features: torch.Tensor | None = None  # the probes' inputs of validation and test (linear, pixels)
    test_features: torch.Tensor | None = None
    # seed -> the linear arm's fitted probe, kept for fine-tuning's lr trials (a cache: the point stays the same)
    probes: dict = field(default_factory=dict)
    # the part of ``val`` a run scores while it trains (data_hunger.monitor_per_class; None: all of it)
    monitor: ImageSet | None = None
    # where the curve has several backbones (Curve.backbones > 1): each one's (backbone, val_features,
    # test_features), of which the fields above hold backbone 0's; :func:`for_seed` picks a seed's
    by_backbone: tuple = ()


def for_seed(data: Point, seed: int) -> tuple[Point, int | None]:
    """The point as seed ``seed``'s transfer runs see it: with its backbone, ``seed mod k`` of the point's k
    backbones, and that backbone's features; and the backbone's index (None: the point has one backbone)."""
    if len(data.by_backbone) < 2:
        return data, None
    index = seed % len(data.by_backbone)
    backbone, val_features, test_features = data.by_backbone[index]
    return dataclasses.replace(data, backbone=backbone, val_features=val_features,
                               test_features=test_features), index  # fmt: skip


def load_point(curve: Curve, view: str, point: int) -> Point:
    """A point's size and the sets of ``view``'s transform: the pool every seed draws from, validation, test."""
    pool = sweep_train_set(curve.preset, view)
    test_set = load_split(paths.prepared_split(view, "test"))
    num_classes = len(pool.classes)
    val = val_set(view)
    per_class = curve.config.monitor_per_class
    return Point(
        n=sweep_sizes(curve.config, curve.preset, pool.labels, num_classes)[point],
        num_classes=num_classes,
        pool=pool,
        val=val,
        monitor=seed_subset(val, per_class, MONITOR_SEED, key=MONITOR_KEY) if per_class else None,
        test=test_set,
        prepare=batch_preparer(pool, augment_train=True),
        score=batch_preparer(test_set, augment_train=False),
    )


# The monitor's images: one fixed draw (the first images of each class in seed 0's order, as a subset of that
# size is drawn), so every run of every arm and size scores the same ones.
MONITOR_SEED = 0


def fit_seed(
    curve: Curve, data: Point, seed: int, lr: float, arm: str, build_model: Callable[[ImageSet], nn.Module]
) -> dict:
    """One trained run: the seed's subset, ``data_hunger.<arm>`` at ``lr``, trained under the validation rule
    over the size's budget (``DataHungerConfig.budget``, or up to ``cap`` for a plateau schedule, whose run
    records where its decay began; best-validation weights kept, step 0 scored too). Where the point has a
    monitor (``data_hunger.monitor_per_class``), the rule scores it alone while the run trains, and the kept
    weights are scored on the whole validation split once at the end: ``val_acc`` and ``val_loss``, which the
    choice reads, are always the whole split's (the monitor's best beside them as ``monitor_val_*``). Its
    ``score`` tests it on the whole test set: the sweep calls it once, for a run it keeps."""
    cfg, runtime = curve.config, curve.runtime
    generator = seed_everything(seed)
    train_set = seed_subset(data.pool, data.n, seed)
    model = build_model(train_set).to(runtime.device)
    steps, eval_every = cfg.budget(len(train_set))
    optimiser = getattr(cfg, arm).at(lr)
    cap = cfg.cap(arm, steps)
    recipe = Recipe.of(optimiser, cfg.batch_size, cap, warmup_steps=int(optimiser.warmup_fraction * steps))
    scored = data.val if data.monitor is None else data.monitor
    history, best = train_until_plateau(
        model, train_set.images, train_set.labels, recipe, runtime, generator,
        val=(scored.images, scored.labels),
        stopping=Stopping(eval_every, cfg.patience, score_at_start=True, cooldown_fraction=cfg.cooldown_fraction,
                          window=cfg.plateau_window, trend=cfg.plateau_score),
        prepare=data.prepare,
        recording=Recording(eval_batch_size=curve.eval_batch_size, description=f"{arm} seed {seed} lr {lr:g}"),
    )  # fmt: skip
    # the kept weights' loss over the whole training subset, unaugmented (a record's train loss is a running mean
    # over the steps before it, with augmentation on)
    kept_train = evaluate(model, train_set.images, train_set.labels, runtime, curve.eval_batch_size,
                          batch_preparer(train_set, augment_train=False))  # fmt: skip
    val_scores = {"val_loss": best["val_loss"], "val_acc": best["val_acc"]}
    if data.monitor is not None:
        whole = evaluate(model, data.val.images, data.val.labels, runtime, curve.eval_batch_size, data.prepare)
        # rank 0's score decides, as it does for every score of the rule (pipeline.train.plateau)
        val_scores = {f"monitor_{key}": value for key, value in val_scores.items()} | {
            "val_loss": from_rank_zero(whole.loss, runtime),
            "val_acc": from_rank_zero(whole.accuracy, runtime),
        }

    def score() -> dict:
        result = evaluate(model, data.test.images, data.test.labels, runtime, curve.eval_batch_size, data.score)
        return {"test_acc": result.accuracy, "test_loss": result.loss}

    return {
        "lr": lr,
        "score": score,  # the test set, called once the run is kept
        "train_loss": kept_train.loss,
        "train_acc": kept_train.accuracy,
        **val_scores,
        "best_step": best["step"],
        "steps": history[-1]["step"],
        "budget": steps,
        **({"cap": cap, "decay_step": best["decay_step"]} if recipe.schedule == "plateau" else {}),
        "stopped_at_cap": history[-1]["step"] == cap,
        "trained_parameters": count_parameters(model, trainable_only=True),
        "curve": [{k: r.get(k) for k in ("step", "train_loss", "val_loss", "val_acc")} for r in history],
    }


def probe_record(probe: Probe, train: tuple, data: Point) -> dict:
    """A few-shot probe's run: the train objective (mean squared error to the {-1, 1} targets), the chosen
    ridge and its validation accuracy; ``score`` gives its test accuracy."""
    from pipeline.models.probe import accuracy, targets

    train_x, train_y = train
    residual = probe.logits(train_x).double() - targets(train_y, data.num_classes)
    return {
        "score": lambda: {"test_acc": accuracy(probe.logits(data.test_features), data.test.labels)},
        "train_loss": residual.pow(2).mean().item(),
        "train_acc": accuracy(probe.logits(train_x), train_y),
        "val_acc": probe.val_acc,
        "reg": probe.reg,
        "trained_parameters": probe.weight.numel() + probe.bias.numel(),
    }


PER_RUN = ("test_acc", "test_loss", "train_loss", "val_loss", "val_acc", "best_step", "steps")


def at_edge(choice: float, grid: list[float]) -> str:
    """``low`` or ``high`` where ``choice`` is the grid's smallest or largest value (the best may lie beyond it),
    else ``""``; a one-value grid is never flagged."""
    if len(grid) < 2:
        return ""
    return "low" if choice == min(grid) else "high" if choice == max(grid) else ""


def point_summary(
    arm: str, point: int, data: Point, runs: dict[int, dict], lr_trials: dict[str, dict], lrs: list[float],
    regs: list[float],
) -> dict:  # fmt: skip
    """A sweep item's JSON: sizes, each per-run number as mean/std/per-seed, every run's record (with its
    validation curve), the learning-rate trials (trained arms) and chosen ridges, and whether a choice sits at
    an end of its grid (``lr_at_edge``: low | high | ""; ``reg_at_edge``: one flag per run)."""
    first = runs[next(iter(runs))]
    summary = {
        "arm": arm,
        "point": point,
        "n_train_per_class": data.n,
        "n_train": len(seed_subset(data.pool, data.n, next(iter(runs)))),
        "n_val": len(data.val),
        **({} if data.monitor is None else {"n_monitor": len(data.monitor)}),
        "n_test": len(data.test),
        "trained_parameters": first["trained_parameters"],
        **{key: spread([float(r[key]) for r in runs.values()]) for key in PER_RUN if key in first},
        "runs": {str(seed): run for seed, run in runs.items()},
    }
    if "lr" in first:
        summary |= {"lr": first["lr"], "lr_trials": lr_trials, "lr_at_edge": at_edge(first["lr"], lrs),
                    "budget": first["budget"],
                    "stopped_at_cap": sum(r["stopped_at_cap"] for r in runs.values())}  # fmt: skip
    if "reg" in first:
        summary["reg"] = [r["reg"] for r in runs.values()]
        summary["reg_at_edge"] = [at_edge(r["reg"], regs) for r in runs.values()]
    return summary


def choose_lr(candidates: list[tuple[dict, object]]) -> tuple[dict, object]:
    """The candidate with the best validation score (``plateau.better_score``: accuracy, then loss); of equals,
    the smaller learning rate (the grid is in increasing order). A candidate's score is one run's, or the mean
    over its choice seeds (:func:`mean_score`)."""
    best = candidates[0]
    for candidate in candidates[1:]:
        if better_score(candidate[0], best[0]):
            best = candidate
    return best


def mean_score(results: list[dict]) -> dict:
    """One candidate's validation score over its runs: the mean accuracy and the mean loss (NaN where a run's
    loss is, so that ``better_score`` never prefers it)."""
    keys = [key for key in ("val_acc", "val_loss") if key in results[0]]  # a probe's run has no loss
    return {key: sum(r[key] for r in results) / len(results) for key in keys}


def accuracy_se(accuracy: float, n_val: int) -> float:
    """The binomial standard error of one validation accuracy on ``n_val`` images."""
    return math.sqrt(max(accuracy * (1 - accuracy), 0.0) / n_val)


def pruned(first_scores: dict[float, dict], n_val: int, prune_z: float) -> set[float]:
    """The learning rates the first seed already rules out: behind the leader's validation accuracy by more than
    ``prune_z`` standard errors of a difference of two accuracies on ``n_val`` images (sqrt(2) x one's, at the
    leader's accuracy). Why this margin: two candidates equally good would differ by more on one seed's validation
    set with probability under 0.3% at z = 3 from its sampling alone (seeds add more spread, never less), so a
    pruned candidate is one the further seeds could hardly have made the choice. ``prune_z`` 0: none pruned."""
    if prune_z <= 0 or len(first_scores) < 2:
        return set()
    leader = max(r["val_acc"] for r in first_scores.values())
    margin = prune_z * math.sqrt(2) * accuracy_se(leader, n_val)
    return {lr for lr, r in first_scores.items() if leader - r["val_acc"] > margin}


def beyond_best(first_scores: dict[float, dict], keep: int) -> set[float]:
    """The learning rates outside the ``keep`` best of the first seed's validation scores (``better_score``'s
    order; of equals, the smaller rate ranks first, as :func:`choose_lr` breaks them): successive halving's
    second rung, which trains only the leaders on the further choice seeds. ``keep`` 0: none dropped. Why 2 is
    safe enough to pre-register (docs/results.md, "Issue 37's bound on compute"): in the committed run every chosen
    rate was among its cell's two best on seed 0 (15 of 15 cells), in its fresh-seed replication 14 of 15."""
    if keep <= 0 or len(first_scores) <= keep:
        return set()

    def order(a: float, b: float) -> int:
        if better_score(first_scores[a], first_scores[b]):
            return -1
        return 1 if better_score(first_scores[b], first_scores[a]) else 0

    # sorted is stable and the grid comes in increasing order, so of equals the smaller rate stays ahead
    return set(sorted(first_scores, key=functools.cmp_to_key(order))[keep:])


def keep_run(result: dict, tracker) -> dict:
    """A kept run's test score, taken once (never for a learning rate the validation set turned down), logged
    to its ``tracker`` and merged into ``result``."""
    test = result.pop("score")()
    tracker.log_metrics(test | {"final_test_acc": test["test_acc"]})  # the run has ended; MLflow takes it
    return result | test


@dataclass(frozen=True)
class Choice:
    """How a trained arm chooses its learning rate (``data_hunger.choice_seeds``, ``prune_z`` and ``choice_keep``):
    every candidate trains on the first seed; those :func:`pruned`, and those outside the ``keep`` best
    (:func:`beyond_best`; 0: no such limit), stop there; the others train on the rest of the first ``seeds``
    seeds; the best mean validation score chooses. ``n_val``: the validation images."""

    seeds: int = 1
    prune_z: float = 0.0
    n_val: int = 1
    keep: int = 0


def trial(record: dict, results: list[tuple[dict, object]], seeds: list[int], choice: Choice, dropped: bool) -> dict:
    """A learning rate's record in ``lr_trials``: its mean validation score ``record`` and, where the choice uses
    several seeds, each seed's score and whether it was pruned (with one choice seed: the score alone, as the
    protocol wrote it before choices used several)."""
    if choice.seeds == 1:
        return record
    scores = [{k: r[k] for k in ("val_acc", "val_loss")} for r, _ in results]
    return record | {"seeds": {str(seed): score for seed, score in zip(seeds, scores, strict=False)}, "pruned": dropped}


def choose_on_validation(run, lrs: list, choosing: list[int], choice: Choice) -> tuple[dict, dict, set, object]:
    """The choice half of :func:`seed_protocol`, which never touches the test set: every learning rate on the
    first of the ``choosing`` seeds, the further ones less the candidates the first seed's scores prune (or leave
    outside its ``keep`` best), the best mean validation score chosen. Returns each candidate's ``run`` results,
    its mean score, the pruned candidates and the chosen one."""
    first = {lr: run(choosing[0], lr) for lr in lrs}
    # pruning spares a candidate its further choice seeds: with one, there are none to spare
    several = len(choosing) > 1
    first_scores = {lr: result for lr, (result, _) in first.items()}
    dropped = pruned(first_scores, choice.n_val, choice.prune_z if several else 0.0)
    dropped |= beyond_best(first_scores, choice.keep if several else 0)
    trained = {lr: [first[lr]] + ([] if lr in dropped else [run(seed, lr) for seed in choosing[1:]]) for lr in lrs}
    means = {lr: mean_score([r for r, _ in trained[lr]]) for lr in lrs}
    chosen = choose_lr([(means[lr], lr) for lr in lrs if lr not in dropped])[1]
    return trained, means, dropped, chosen


def seed_protocol(
    run, lrs: list[float | None], seeds: list[int], choice: Choice = Choice()
) -> tuple[dict[int, dict], dict[str, dict]]:
    """The learning-rate protocol of the curve: every learning rate of the arm's grid (``[None]`` for a probe,
    which chooses its own ridge) trains on the first ``choice.seeds`` seeds, less those the first seed's
    validation scores prune (:func:`pruned`); the candidate with the best mean validation score is chosen
    (:func:`choose_lr`, :func:`mean_score`), its runs kept, and the other seeds train at its rate. Each kept run's
    test set is scored once (:func:`keep_run`); the test set chooses nothing. ``run(seed, lr)`` trains one run
    and returns its result and tracker.

    Returns the kept runs by seed and, per learning rate, its mean validation score over the seeds it trained on,
    each seed's score and whether it was pruned."""
    choosing, others = seeds[: choice.seeds], seeds[choice.seeds :]
    trained, means, dropped, chosen = choose_on_validation(run, lrs, choosing, choice)
    runs = {seed: keep_run(*pair) for seed, pair in zip(choosing, trained[chosen], strict=True)}
    for seed in others:
        runs[seed] = keep_run(*run(seed, chosen))
    trials = {} if lrs == [None] else {
        f"{lr:g}": trial(means[lr], trained[lr], choosing, choice, lr in dropped) for lr in lrs
    }  # fmt: skip
    return runs, trials
