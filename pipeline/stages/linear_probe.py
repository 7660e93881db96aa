"""Stage linear_probe: freeze the pretrained backbone and train a new linear head on its features, per seed
(the headline's ``linear`` arm; seed 000's "pretrained ViT feature extractor").

Each seed trains on its own ``offline.train_per_class`` images per class (as train_scratch), for the
recipe's fixed epochs (seed 000's head); the validation split is scored every epoch and the test set once,
by the evaluate stage. The frozen backbone's features are computed once; training the head on them is the
same as seed 000's per-epoch forward through the frozen model (tests/unit/train/test_loop.py proves it),
only 10x cheaper for 10 epochs.
"""

from __future__ import annotations

import dataclasses

from torch import nn

from pipeline.core import paths
from pipeline.core.entry import stage_main
from pipeline.core.files import atomic_dir, file_sha256
from pipeline.core.logs import stage_log as log
from pipeline.core.params_yaml import load_params
from pipeline.data.images import batch_preparer, view_transform
from pipeline.data.subsets import SEED_ARMS_KEY, seed_subset, sweep_train_set, val_set
from pipeline.results.history import write_histories
from pipeline.tracking.tracker import stage_tracker
from pipeline.train.checkpoints import load_backbone, model_card, save_head, with_head, write_model_card
from pipeline.train.loop import Recording, extract_features, train
from pipeline.train.runtime import resolve_runtime, seed_everything
from pipeline.train.schedule import epoch_recipe


@stage_main
def main() -> None:
    params = load_params()
    runtime = resolve_runtime(params.runtime)
    pool, val = sweep_train_set(params.preset, "pretrained"), val_set("pretrained")
    backbone = load_backbone(params.backbone_model_name, runtime, params.backbone_source)
    batch, score = params.evaluate.batch_size, batch_preparer(val, False)
    val_features = extract_features(backbone, val.images, runtime, batch, score)
    cfg = params.head_recipe
    backbone_hash = file_sha256(paths.BACKBONES[params.backbone_source])
    histories = {}
    example = score(val.images[:2], False, None)  # the logged models' signature
    stage = stage_tracker(params, "linear_probe", runtime=runtime, arm="linear", backbone_sha256=backbone_hash)
    with stage, atomic_dir(paths.LINEAR_PROBES) as folder:  # every seed's head, or the previous folder untouched
        for seed in params.seeds:
            train_set = seed_subset(pool, params.seed_arms_per_class, seed, SEED_ARMS_KEY)
            train_features = extract_features(backbone, train_set.images, runtime, batch, score)
            recipe, steps_per_epoch = epoch_recipe(cfg, len(train_set), cfg.batch_size)
            generator = seed_everything(seed)
            head = nn.Linear(backbone.config.hidden_dim, len(pool.classes)).to(runtime.device)
            with stage.child(f"linear_probe-seed{seed}", {"seed": str(seed)}, seed=str(seed)) as tracker:

                def report(record: dict, seed: int = seed, tracker=tracker) -> None:
                    tracker.log_record(record)
                    log.info(f"linear seed {seed} epoch {record['epoch']}: val_acc {record['val_acc']:.4f}")

                recording = Recording(steps_per_epoch, {"val": (val_features, val.labels)}, batch, report)
                histories[seed] = train(head, train_features, train_set.labels, recipe, runtime, generator,
                                        recording=recording)  # fmt: skip
                tracker.log_model(with_head(backbone, head), example)  # the whole arm: backbone + this head
            save_head(folder, seed, head)
        config = dataclasses.replace(backbone.config, num_classes=len(pool.classes))
        transform = view_transform(params.preset, "pretrained")
        card = model_card("linear", params.backbone_model_name, config, val, transform, params.seeds)
        card["backbone"] = params.backbone_source  # predict loads the same backbone
        write_model_card(folder, card)
        stage.log_artifact(write_histories(paths.HISTORY, "linear", histories), "history")


if __name__ == "__main__":
    main()
