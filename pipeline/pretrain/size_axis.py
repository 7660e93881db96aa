"""The paper's own data-hunger axis, in miniature: vary the *pretraining* set (Figures 3 and 4).

"When pre-trained on the smallest dataset, ImageNet, ViT-Large models underperform compared to ViT-Base
models [...] With JFT-300M, do we see the full benefit of larger models" (section 4.2), and Figure 4: "ResNets
perform better with smaller pre-training datasets but plateau sooner than ViT, which performs better with
larger pre-training." Here: supervised backbones of our ViT and of a small ResNet of the same size, pretrained
on nested subsets of the seven pool classes by one recipe (``backbone``'s: the same epochs, so every image is
seen equally often whatever the size), then scored like the paper's Figure 4 by the few-shot probe
(:mod:`pipeline.models.probe`) on the target classes, and by their own pool test accuracy. The backbones themselves
are built in :mod:`pipeline.pretrain.trunks`.
"""

from __future__ import annotations

from pipeline.data.images import ImageSet
from pipeline.data.subsets import SHOTS_KEY, seed_subset
from pipeline.models.probe import accuracy, fit_probe
from pipeline.results.stats import spread

ARCHES = ("vit", "resnet")  # dvc.yaml's pretrain_scale matrix; vit_masked_patch comes from its own stage


def few_shot(
    embed, target_pool: ImageSet, val: ImageSet, test: ImageSet, shots: list[int], seeds: list[int],
    regs: list[float],
) -> dict[str, dict]:  # fmt: skip
    """The few-shot probe at each of ``shots`` images per class, once per seed (each seed its own shots,
    nested across sizes), ridge chosen on ``val``. ``embed(image_set) -> (N, D)`` gives features.
    Returns ``{shots: {mean, std, per_seed (test accuracy), val: {mean, std, per_seed}}}``."""
    val_x, test_x = embed(val), embed(test)
    num_classes = len(test.classes)
    result = {}
    for n in shots:
        tests, vals = [], []
        for seed in seeds:
            train = seed_subset(target_pool, n, seed, SHOTS_KEY)
            probe = fit_probe(embed(train), train.labels, val_x, val.labels, num_classes, regs)
            tests.append(accuracy(probe.logits(test_x), test.labels))
            vals.append(probe.val_acc)
        result[str(n)] = {**spread(tests), "val": spread(vals)}
    return result


def gather(
    items: list[dict], masked: dict, pixels: dict[str, dict], decision_shots: int, masked_pool: dict | None = None,
    masked_long: dict | None = None,
) -> dict:  # fmt: skip
    """``{arch: {n_pretrain: {shots: {mean, std, per_seed, val}}}}`` for vit, resnet and vit_masked_patch (the
    default on pool + target images and, given ``masked_pool``, its pool-only twin at the pool's size), given
    ``masked_long`` vit_masked_patch_long (the stretch: the default's images, more epochs), the pixel probe, each
    backbone's pool test accuracy and parameters, and the masked-patch go/no-go decision (the default's: it was
    pre-registered for it)."""
    result: dict = {arch: {} for arch in (*ARCHES, "vit_masked_patch")}
    pool_test, parameters = {arch: {} for arch in ARCHES}, {}
    for item in items:
        result[item["arch"]][str(item["n_pretrain"])] = item["few_shot"]
        pool_test[item["arch"]][str(item["n_pretrain"])] = item["pool_test_acc"]
        parameters[item["arch"]] = item["trained_parameters"]
    result["vit_masked_patch"][str(masked["n_pretrain"])] = masked["few_shot"]
    if masked_pool is not None:
        result["vit_masked_patch"][str(masked_pool["n_pretrain"])] = masked_pool["few_shot"]
        result["vit_masked_patch_sizes"] = {"all": masked["n_pretrain"], "pool": masked_pool["n_pretrain"]}
    parameters["vit_masked_patch"] = masked["trained_parameters"]
    if masked_long is not None:
        result["vit_masked_patch_long"] = {str(masked_long["n_pretrain"]): masked_long["few_shot"]}
        result["vit_masked_patch_long_epochs"] = masked_long["epochs"]
    supervised = result["vit"][max(result["vit"], key=int)][str(decision_shots)]["val"]["mean"]
    challenger = masked["few_shot"][str(decision_shots)]["val"]["mean"]
    result["decision"] = {
        "rule": f"go if the masked-patch ViT's validation few-shot accuracy at {decision_shots} per class (mean over "
        "seeds) beats the supervised ViT's on the whole pool",
        "masked_patch_val": challenger,
        "supervised_val": supervised,
        "go": challenger > supervised,
    }
    return result | {"pixels": pixels, "pool_test_acc": pool_test, "trained_parameters": parameters}


def stretch_outcome(metrics: dict, comparisons: dict, shots: int) -> dict:
    """Issue 21's pre-registered stretch (params.yaml ``masked_patch.stretch_*``), applied on the test set as it
    was written: the longer-trained masked-patch ViT against the pixel probe at ``shots`` per class, paired by
    seed; a success only if the whole 95% interval is above zero."""
    size = next(iter(metrics["vit_masked_patch_long"]))
    difference = comparisons["vit_masked_patch_long-pixels"][f"{size}/{shots}"]
    return {
        "rule": f"success if the masked-patch ViT pretrained for {metrics['vit_masked_patch_long_epochs']} epochs "
        f"beats the few-shot probe on raw pixels at {shots} per class on the test set (paired over seeds, 95% t "
        "interval above 0)",
        "shots": shots,
        "difference": difference,
        "success": difference["low"] > 0,
    }


def scale_csv(metrics: dict) -> str:
    """``plots/pretraining_scale.csv`` for `dvc plots`: one row per backbone, pretraining size and shots; the
    pixel probe repeated at every size of the axis (a flat line)."""
    rows = ["arch,n_pretrain,shots,test_acc,test_acc_std"]
    sizes = sorted({int(n) for arch in ARCHES for n in metrics[arch]})
    for arch in (*ARCHES, "vit_masked_patch", "vit_masked_patch_long"):
        for n, by_shots in sorted(metrics.get(arch, {}).items(), key=lambda i: int(i[0])):
            rows += [f"{arch},{n},{s},{v['mean']:.6g},{v['std']:.6g}" for s, v in by_shots.items()]
    for s, v in metrics["pixels"].items():
        rows += [f"pixels,{n},{s},{v['mean']:.6g},{v['std']:.6g}" for n in sizes]
    return "\n".join(rows) + "\n"
