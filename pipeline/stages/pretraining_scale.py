"""Stage pretraining_scale: the pretraining-size axis gathered into metrics/pretraining_scale.json,
plots/pretraining_scale.png (the paper's Figure 4 in miniature) and plots/pretraining_scale.csv.

The JSON is ``{arch: {n_pretrain: {shots: {mean, std, per_seed, val}}}}`` for ``vit``, ``resnet`` and
``vit_masked_patch`` (few-shot test accuracy; ``val``: the same probe on the validation split), with the
pixel probe at the same shots and seeds, each backbone's pool test accuracy, ``decision``: the masked-patch
go/no-go rule of params.yaml applied on validation numbers (never test), and ``stretch``: issue 21's
pre-registered stretch (``vit_masked_patch_long``, the default trained longer) applied as written, on test;
``slopes``: each backbone's few-shot gain per decade of pretraining images and the ViT's minus the ResNet's
(Figure 4's direction), per seed then over seeds with 95% t intervals.
"""

from __future__ import annotations

from pipeline.core import paths
from pipeline.core.entry import stage_main
from pipeline.core.files import read_json, write_json, write_text
from pipeline.core.logs import stage_log as log
from pipeline.core.params_yaml import load_params
from pipeline.data import presets
from pipeline.data.images import load_split
from pipeline.data.subsets import sweep_train_set, val_set
from pipeline.models.probe import flat_pixels
from pipeline.pretrain.size_axis import ARCHES, few_shot, gather, scale_csv, stretch_outcome
from pipeline.results.figures import plot_pretraining_scale, save_note
from pipeline.results.headline import pretraining_slopes, scale_comparisons
from pipeline.tracking.tracker import stage_tracker

ITEMS = paths.METRICS / "pretraining_scale"


def read_item(name: str) -> dict:
    return read_json(ITEMS / f"{name}.json")


@stage_main
def main() -> None:
    params = load_params()
    cfg = params.pretraining_scale
    items = [read_item(f"{arch}_{point}") for arch in ARCHES for point in cfg.points]
    masked = read_item("vit_masked_patch")
    if not presets.get(params.preset).has_pool:
        write_json(paths.METRICS / "pretraining_scale.json", {"preset": params.preset, "skipped": masked["skipped"]})
        write_text(paths.PLOTS / "pretraining_scale.csv", "arch,n_pretrain,shots,test_acc,test_acc_std\n")
        save_note("pretraining_scale.png", f"not run for the {params.preset} preset: {masked['skipped']}")
        return
    val, test = val_set("scratch"), load_split(paths.prepared_split("scratch", "test"))
    pixels = few_shot(flat_pixels, sweep_train_set("offline", "scratch"), val, test, cfg.shots, params.seeds,
                      params.data_hunger.probe_regs)  # fmt: skip
    metrics = gather(items, masked, pixels, params.masked_patch.decision_shots, read_item("vit_masked_patch_pool"),
                     read_item("vit_masked_patch_long"))  # fmt: skip
    metrics |= {"preset": params.preset, "n_val": len(val), "n_test": len(test), "seeds": params.seeds}
    metrics["comparisons"] = scale_comparisons(metrics)  # paired by seed, 95% t intervals
    metrics["slopes"] = pretraining_slopes(metrics)  # gain per decade, Figure 4's direction
    metrics["stretch"] = stretch_outcome(metrics, metrics["comparisons"], params.masked_patch.stretch_shots)
    write_json(paths.METRICS / "pretraining_scale.json", metrics)
    write_text(paths.PLOTS / "pretraining_scale.csv", scale_csv(metrics))
    plot_pretraining_scale(metrics)
    with stage_tracker(params, "pretraining_scale") as tracker:
        for arch in (*ARCHES, "vit_masked_patch", "vit_masked_patch_long"):
            for n, by_shots in metrics[arch].items():
                tracker.log_metrics({f"few_shot.{arch}.{s}": v["mean"] for s, v in by_shots.items()}, step=int(n))
        tracker.log_metrics({"decision.go": float(metrics["decision"]["go"]),
                             "stretch.success": float(metrics["stretch"]["success"])})  # fmt: skip
        tracker.log_artifact(paths.METRICS / "pretraining_scale.json")
        tracker.log_artifact(paths.PLOTS / "pretraining_scale.png")
    decision, stretch = metrics["decision"], metrics["stretch"]
    log.info(f"pretraining_scale: masked patch {'GO' if decision['go'] else 'NO-GO'} (validation few-shot "
             f"{decision['masked_patch_val']:.3f} vs supervised {decision['supervised_val']:.3f})")  # fmt: skip
    gap = stretch["difference"]
    log.info(
        f"pretraining_scale: stretch {'SUCCESS' if stretch['success'] else 'NOT MET'} (longer masked patch "
        f"minus pixels at {stretch['shots']} shots {gap['mean']:+.3f} [{gap['low']:+.3f}, {gap['high']:+.3f}])"
    )


if __name__ == "__main__":
    main()
