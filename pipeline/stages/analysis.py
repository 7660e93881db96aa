"""Stage analysis: where the trained ViTs attend, what their position embeddings learned, and how the
pretrained arm copes with another input size (paper Sec. 3.2 and 4.5, Fig. 6 and 7; seeds 001 and 003).

Writes ``plots/attention.png`` (class-token attention per layer and attention rollout, both arms, the
first test image of each class), ``plots/position_similarity.png`` (Fig. 7 centre, both arms) and
``metrics/resolution.json`` (the pretrained arm at its training size and at about 1.5x, with bicubically
interpolated position embeddings and bilinearly upsampled test images; no fine-tuning at the new size).
"""

from __future__ import annotations

from pipeline.core import paths
from pipeline.core.entry import stage_main
from pipeline.core.files import write_json
from pipeline.core.logs import stage_log as log
from pipeline.core.params_yaml import load_params
from pipeline.data.images import load_split
from pipeline.results.attention_figures import plot_attention, plot_position_similarity
from pipeline.results.attention_maps import attention_panels, first_of_each_class, resolution_change
from pipeline.results.figures import pyplot
from pipeline.results.stats import numeric_leaves
from pipeline.tracking.tracker import stage_tracker
from pipeline.train.checkpoints import load_linear, load_scratch
from pipeline.train.runtime import resolve_runtime


@stage_main
def main() -> None:
    plt = pyplot()
    params = load_params()
    runtime = resolve_runtime(params.runtime)
    first = params.seeds[0]
    image_sets = {arm: load_split(paths.prepared_split(view, "test")) for arm, view in paths.HEADLINE_VIEWS.items()}
    num_classes = len(image_sets["scratch"].classes)
    models = {
        "scratch": load_scratch(params.model_name, num_classes, first, runtime),
        "linear": load_linear(params.backbone_model_name, params.backbone_source, num_classes, first, runtime),
    }
    indices = first_of_each_class(image_sets["scratch"].labels)
    panels = {arm: attention_panels(models[arm], image_sets[arm], indices, runtime) for arm in models}
    plot_attention(plt, panels, image_sets, indices)
    plot_position_similarity(plt, {arm: models[arm].encoder.pos_embedding.cpu() for arm in models})

    resolution = resolution_change(params.backbone_model_name, params.backbone_source, params.seeds,
                                   image_sets["linear"], runtime, params.evaluate.batch_size)  # fmt: skip
    write_json(paths.METRICS / "resolution.json", resolution)
    with stage_tracker(params, "analysis", runtime=runtime) as tracker:
        tracker.log_metrics(numeric_leaves({"resolution": resolution}))
        for name in ("attention.png", "position_similarity.png"):
            tracker.log_artifact(paths.PLOTS / name)
    for key in ("train_size", "other_size"):
        acc = resolution[key]["test_acc"]
        log.info(
            f"analysis: linear probe at {resolution[key]['size']}px: test accuracy {acc['mean']:.4f} ± "
            f"{acc['std']:.4f} over seeds {params.seeds}"
        )
    log.info(
        f"analysis: wrote attention.png, position_similarity.png to {paths.PLOTS}/ and {paths.METRICS}/resolution.json"
    )


if __name__ == "__main__":
    main()
