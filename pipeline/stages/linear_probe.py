"""Stage linear_probe: freeze the pretrained backbone and train a new linear head on its features, per seed
(the headline's ``linear`` arm; seed 000's "pretrained ViT feature extractor").

The frozen backbone's features are computed once; training the head on them is the same as
seed 000's per-epoch forward through the frozen model (tests/unit/test_engine.py proves it),
only 10x cheaper for 10 epochs.
"""

from __future__ import annotations

import dataclasses

from torch import nn

from pipeline import paths
from pipeline.arms.linear import head_state, with_head
from pipeline.checkpoints import MODEL_CARD, model_card
from pipeline.config import load_params
from pipeline.data import batch_preparer, load_split, view_transform
from pipeline.engine import Recipe, epoch_steps, extract_features, train
from pipeline.errors import stage_main
from pipeline.files import atomic_dir, file_sha256, save_tensors, write_json
from pipeline.history import write_histories
from pipeline.pretraining import load_backbone
from pipeline.runtime import resolve_runtime, seed_everything
from pipeline.tracking import stage_tracker


@stage_main
def main() -> None:
    params = load_params()
    runtime = resolve_runtime(params.runtime)
    train_set = load_split(paths.prepared_split("pretrained", "train"))
    test_set = load_split(paths.prepared_split("pretrained", "test"))
    backbone = load_backbone(params.backbone_model_name, runtime)
    batch = params.evaluate.batch_size
    train_features = extract_features(backbone, train_set.images, runtime, batch, batch_preparer(train_set, False))
    test_features = extract_features(backbone, test_set.images, runtime, batch, batch_preparer(test_set, False))
    cfg = params.head_recipe
    steps_per_epoch = epoch_steps(1, len(train_set), cfg.batch_size)
    recipe = Recipe.of(cfg, cfg.batch_size, cfg.epochs * steps_per_epoch)
    backbone_hash = file_sha256(paths.BACKBONE)
    histories = {}
    example = batch_preparer(test_set, False)(test_set.images[:2], False, None)  # the logged models' signature
    stage = stage_tracker(params, "linear_probe", runtime=runtime, arm="linear", backbone_sha256=backbone_hash)
    with stage, atomic_dir(paths.LINEAR_PROBES) as folder:  # every seed's head, or the previous folder untouched
        for seed in params.seeds:
            generator = seed_everything(seed)
            head = nn.Linear(backbone.config.hidden_dim, len(train_set.classes)).to(runtime.device)
            with stage.child(f"linear_probe-seed{seed}", {"seed": str(seed)}, seed=str(seed)) as tracker:

                def report(record: dict, seed: int = seed, tracker=tracker) -> None:
                    tracker.log_metrics(
                        {k: v for k, v in record.items() if k not in ("epoch", "step")}, step=record["epoch"]
                    )
                    print(f"linear seed {seed} epoch {record['epoch']}: test_acc {record['test_acc']:.4f}")

                histories[seed] = train(
                    head, train_features, train_set.labels, recipe, runtime, generator,
                    record_every=steps_per_epoch, evaluations={"test": (test_features, test_set.labels)},
                    on_record=report, eval_batch_size=batch,
                )  # fmt: skip
                last = histories[seed][-1]
                tracker.log_metrics({"final_test_acc": last["test_acc"], "final_test_loss": last["test_loss"]})
                tracker.log_model(with_head(backbone, head), example)  # the whole arm: backbone + this head
            save_tensors(folder / paths.linear_probe(seed).name, head_state(head))
        config = dataclasses.replace(backbone.config, num_classes=len(train_set.classes))
        transform = view_transform(params.preset, "pretrained")
        card = model_card("linear", params.backbone_model_name, config, test_set, transform, params.seeds)
        write_json(folder / MODEL_CARD, card)
        stage.log_artifact(write_histories(paths.HISTORY, "linear", histories), "history")


if __name__ == "__main__":
    main()
