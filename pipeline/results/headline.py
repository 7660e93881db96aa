"""The headline numbers, gathered from the stages' detailed files into ``metrics/summary.json``: the one file
dvc.yaml declares as DVC metrics, so that ``dvc metrics show`` and ``dvc exp show`` print a screenful (about
a hundred numbers: means, stds and the 95% intervals the README quotes) while per-seed lists, per-run curves,
lr trials and per-class scores stay in the detailed files beside it (plain outputs, committed).
"""

from __future__ import annotations


def mean_std(value: dict) -> dict:
    return {"mean": value["mean"], "std": value["std"]}


def interval(value: dict) -> dict:
    return {"mean": value["mean"], "low": value["low"], "high": value["high"]}


def headline(evaluate: dict, data_hunger: dict, comparisons: dict, ablation: dict, pretraining: dict,
             backbone: dict, arms: tuple[str, ...], shots: int) -> dict:  # fmt: skip
    """``metrics/summary.json`` from the detailed metrics files (each as its stage wrote it); the pretraining-size
    axis at ``shots`` per class (params.yaml's ``masked_patch.stretch_shots``, one of ``pretraining_scale.shots``)."""
    protocol_n = str(evaluate["protocol"]["n_train_per_class"])
    return {
        "seed000": {arm: mean_std(evaluate[arm]["test_acc"]) for arm in ("scratch", "linear")},
        "curve": {arm: {n: mean_std(value) for n, value in data_hunger[arm].items()} for arm in arms},
        f"paired_at_{protocol_n}": {
            pair: interval(by_size[protocol_n])
            for pair, by_size in comparisons["curve"].items()
            if protocol_n in by_size
        },  # fmt: skip
        "baselines_at_protocol": {key: evaluate["baselines"][key] for key in ("chance", "majority", "pixels_logreg")},
        "ablation": {
            name: {"test_acc": variant["test_acc"]["mean"], "collapse": variant["collapse"]["mean"]}
            for name, variant in ablation["variants"].items()
        },  # fmt: skip
        "pretraining_scale": pretraining_headline(pretraining, shots),
        "backbone_pool_test_acc": backbone.get("pool_test_acc"),
    }


def pretraining_headline(pretraining: dict, shots: int) -> dict:
    """Few-shot test accuracy at ``shots`` per class per architecture and pretraining size, and the pixel probe's;
    empty for the paper preset, which has no pretraining-size axis."""
    key = str(shots)
    result = {
        arch: {size: by_shots[key]["mean"] for size, by_shots in pretraining[arch].items()}
        for arch in ("vit", "resnet", "vit_masked_patch", "vit_masked_patch_long")
        if pretraining.get(arch)
    }
    if "pixels" in pretraining:
        result["pixels"] = pretraining["pixels"][key]["mean"]
    return result


def count_numbers(value) -> int:
    """How many numbers a JSON value holds (what `dvc metrics show` prints one cell for)."""
    if isinstance(value, dict):
        return sum(count_numbers(v) for v in value.values())
    if isinstance(value, list):
        return sum(count_numbers(v) for v in value)
    return int(isinstance(value, (int, float)) and not isinstance(value, bool))


def scale_comparisons(scale: dict) -> dict[str, dict[str, dict]]:
    """The pretraining-size axis's stated comparisons, paired by seed (each seed draws the same shots for every
    backbone): ``{"A-B": {"<n_pretrain>/<shots>": paired_difference}}`` for the ResNet against the ViT and each
    against the pixel probe at every pretraining size, the masked-patch ViT against the supervised ViT on the
    whole pool and against pixels, and the longer-trained masked-patch ViT (the stretch) against pixels and the
    default."""
    from pipeline.results.stats import paired_difference

    def per_seed(arch: str, size: str, shots: str) -> list[float]:
        return (scale["pixels"] if arch == "pixels" else scale[arch][size])[shots]["per_seed"]

    result: dict[str, dict[str, dict]] = {}
    sizes = sorted(scale["vit"], key=int)
    shots = sorted(scale["pixels"], key=int)
    for a, b in (("resnet", "vit"), ("resnet", "pixels"), ("vit", "pixels")):
        result[f"{a}-{b}"] = {f"{size}/{n}": paired_difference(per_seed(a, size, n), per_seed(b, size, n))
                              for size in sizes for n in shots}  # fmt: skip
    for masked_size in sorted(scale.get("vit_masked_patch", {}), key=int):
        for b, b_size in (("vit", sizes[-1]), ("pixels", None)):
            result.setdefault(f"vit_masked_patch-{b}", {}).update({
                f"{masked_size}/{n}": paired_difference(per_seed("vit_masked_patch", masked_size, n),
                                                        per_seed(b, b_size, n)) for n in shots
            })  # fmt: skip
    for long_size in scale.get("vit_masked_patch_long", {}):  # the stretch, against pixels and the default
        for b in ("pixels", "vit_masked_patch"):
            result[f"vit_masked_patch_long-{b}"] = {
                f"{long_size}/{n}": paired_difference(per_seed("vit_masked_patch_long", long_size, n),
                                                      per_seed(b, long_size, n)) for n in shots
            }  # fmt: skip
    if "vit_masked_patch_sizes" in scale:  # what the target classes' unlabeled images add: pool + target - pool
        everything, pool = (str(scale["vit_masked_patch_sizes"][k]) for k in ("all", "pool"))
        result["vit_masked_patch-vit_masked_patch_pool"] = {
            f"{everything}/{n}": paired_difference(per_seed("vit_masked_patch", everything, n),
                                                   per_seed("vit_masked_patch", pool, n)) for n in shots
        }  # fmt: skip
    return result


def pretraining_slopes(scale: dict, arches: tuple[str, ...] = ("vit", "resnet")) -> dict[str, dict[str, dict]]:
    """Each backbone's few-shot gain per decade of pretraining images, and the ViT's minus the ResNet's: Figure 4's
    direction in one number per number of shots (the paper's ViT gains more per decade than its ResNets, which is
    how it overtakes them). Per seed, the least-squares slope of test accuracy on log10(pretraining images) over
    the axis's sizes; then, over the seeds, the mean and its 95% t interval (``arch: {shots: ...}`` against a slope
    of 0, ``"vit-resnet": {shots: ...}`` paired by seed), in accuracy per decade."""
    import math

    from pipeline.results.stats import paired_difference

    sizes = sorted(scale[arches[0]], key=int)
    x = [math.log10(int(size)) for size in sizes]
    x_mean = sum(x) / len(x)
    spread = sum((v - x_mean) ** 2 for v in x)

    def slopes(arch: str, shots: str) -> list[float]:
        by_seed = zip(*(scale[arch][size][shots]["per_seed"] for size in sizes), strict=True)
        return [sum((v - x_mean) * y for v, y in zip(x, ys, strict=True)) / spread for ys in by_seed]

    shots = sorted(scale["pixels"], key=int)
    result = {arch: {n: paired_difference(slopes(arch, n), [0.0] * len(slopes(arch, n))) for n in shots}
              for arch in arches}  # fmt: skip
    a, b = arches
    result[f"{a}-{b}"] = {n: paired_difference(slopes(a, n), slopes(b, n)) for n in shots}
    return result
