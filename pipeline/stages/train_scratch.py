"""Stage train_scratch: the same ViT from random initialisation on a few-shot train set, per seed.

Each seed draws its own ``offline.train_per_class`` images per class (the paper preset: every training
image but the ``validation.paper_per_class`` per class held out, about 195 where seed 000 used 225) with the
curve's sampler, so seed s trains on the images the curve's arms see at that size. The
recipe runs its fixed epochs, as seed 000 did; the validation split is scored every epoch (the history's
``val_*``) and the test set once, by the evaluate stage.

Each preset has its own recipe in params.yaml (``train_scratch.offline`` / ``train_scratch.paper``).
The paper preset's is seed 000's: Adam, lr 3e-3, betas (0.9, 0.999), weight decay 0.3, batch 32,
5 epochs, dropout 0.1 after the position embeddings and after each dense layer of the MLP.
"""

from __future__ import annotations

from pipeline.core import paths
from pipeline.core.config import Params
from pipeline.core.entry import stage_main
from pipeline.core.files import atomic_dir
from pipeline.core.logs import stage_log as log
from pipeline.core.params_yaml import load_params
from pipeline.data.images import ImageSet, batch_preparer, view_transform
from pipeline.data.subsets import SEED_ARMS_KEY, seed_subset, sweep_train_set, val_set
from pipeline.models.vit import ViT, vit_config
from pipeline.results.history import write_histories
from pipeline.tracking.tracker import Tracker, stage_tracker
from pipeline.train.checkpoints import model_card, save_scratch, write_model_card
from pipeline.train.loop import Recording, train
from pipeline.train.runtime import Runtime, resolve_runtime, seed_everything
from pipeline.train.schedule import epoch_recipe


def train_one_seed(
    params: Params, seed: int, train_set: ImageSet, val_set: ImageSet, runtime: Runtime, tracker: Tracker
) -> tuple[ViT, list[dict]]:
    """Trains one from-scratch model; returns it and its per-epoch history."""
    cfg = params.scratch_recipe
    recipe, steps_per_epoch = epoch_recipe(cfg, len(train_set), cfg.batch_size)
    generator = seed_everything(seed)
    config = vit_config(
        params.model_name, num_classes=len(train_set.classes), dropout=cfg.dropout, dropout_after_attention=False
    )
    model = ViT(config).to(runtime.device)

    def report(record: dict) -> None:
        tracker.log_record(record)
        log.info(f"scratch seed {seed} epoch {record['epoch']}: val_acc {record['val_acc']:.4f}")

    recording = Recording(steps_per_epoch, {"val": (val_set.images, val_set.labels)}, params.evaluate.batch_size,
                          report, description=f"scratch seed {seed}")  # fmt: skip
    history = train(model, train_set.images, train_set.labels, recipe, runtime, generator,
                    prepare=batch_preparer(train_set, cfg.augment), recording=recording)  # fmt: skip
    return model, history


@stage_main
def main() -> None:
    params = load_params()
    pool, val = sweep_train_set(params.preset, "scratch"), val_set("scratch")
    runtime = resolve_runtime(params.runtime)
    histories = {}
    example = batch_preparer(val, False)(val.images[:2], False, None)  # the logged models' signature
    with stage_tracker(params, "train_scratch", runtime=runtime, arm="scratch") as stage:
        with atomic_dir(paths.SCRATCH_MODELS) as folder:  # every seed's model, or the previous folder untouched
            for seed in params.seeds:
                with stage.child(f"train_scratch-seed{seed}", {"seed": str(seed)}, seed=str(seed)) as tracker:
                    train_set = seed_subset(pool, params.seed_arms_per_class, seed, SEED_ARMS_KEY)
                    model, histories[seed] = train_one_seed(params, seed, train_set, val, runtime, tracker)
                    tracker.log_model(model, example)
                save_scratch(folder, seed, model)
            transform = view_transform(params.preset, "scratch")
            card = model_card("scratch", params.model_name, model.config, val, transform, params.seeds)
            write_model_card(folder, card)
        stage.log_artifact(write_histories(paths.HISTORY, "scratch", histories), "history")


if __name__ == "__main__":
    main()
