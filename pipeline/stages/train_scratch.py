"""Stage train_scratch: the same ViT from random initialisation on the few-shot train set, per seed.

Each preset has its own recipe in params.yaml (``train_scratch.offline`` / ``train_scratch.paper``).
The paper preset's is seed 000's: Adam, lr 3e-3, betas (0.9, 0.999), weight decay 0.3, batch 32,
5 epochs, dropout 0.1 after the position embeddings and after each dense layer of the MLP.
"""

from __future__ import annotations

from pipeline import paths
from pipeline.checkpoints import MODEL_CARD, model_card
from pipeline.config import Params, load_params
from pipeline.data import ImageSet, batch_preparer, load_split, view_transform
from pipeline.engine import Recipe, epoch_steps, train
from pipeline.errors import stage_main
from pipeline.files import atomic_dir, save_tensors, write_json
from pipeline.history import write_histories
from pipeline.model import ViT, vit_config
from pipeline.runtime import Runtime, resolve_runtime, seed_everything
from pipeline.tracking import Tracker, stage_tracker


def train_one_seed(
    params: Params, seed: int, train_set: ImageSet, test_set: ImageSet, runtime: Runtime, tracker: Tracker
) -> tuple[ViT, list[dict]]:
    """Trains one from-scratch model; returns it and its per-epoch history."""
    cfg = params.scratch_recipe
    steps_per_epoch = epoch_steps(1, len(train_set), cfg.batch_size)
    recipe = Recipe.of(cfg, cfg.batch_size, cfg.epochs * steps_per_epoch)
    generator = seed_everything(seed)
    config = vit_config(
        params.model_name, num_classes=len(train_set.classes), dropout=cfg.dropout, dropout_after_attention=False
    )
    model = ViT(config).to(runtime.device)

    def report(record: dict) -> None:
        tracker.log_metrics({k: v for k, v in record.items() if k not in ("epoch", "step")}, step=record["epoch"])
        print(f"scratch seed {seed} epoch {record['epoch']}: test_acc {record['test_acc']:.4f}")

    history = train(
        model, train_set.images, train_set.labels, recipe, runtime, generator,
        prepare=batch_preparer(train_set, cfg.augment), record_every=steps_per_epoch,
        evaluations={"test": (test_set.images, test_set.labels)}, on_record=report,
        eval_batch_size=params.evaluate.batch_size,
        description=f"scratch seed {seed}",
    )  # fmt: skip
    tracker.log_metrics({"final_test_acc": history[-1]["test_acc"], "final_test_loss": history[-1]["test_loss"]})
    return model, history


@stage_main
def main() -> None:
    params = load_params()
    train_set = load_split(paths.prepared_split("scratch", "train"))
    test_set = load_split(paths.prepared_split("scratch", "test"))
    runtime = resolve_runtime(params.runtime)
    histories = {}
    example = batch_preparer(test_set, False)(test_set.images[:2], False, None)  # the logged models' signature
    with stage_tracker(params, "train_scratch", runtime=runtime, arm="scratch") as stage:
        with atomic_dir(paths.SCRATCH_MODELS) as folder:  # every seed's model, or the previous folder untouched
            for seed in params.seeds:
                with stage.child(f"train_scratch-seed{seed}", {"seed": str(seed)}, seed=str(seed)) as tracker:
                    model, histories[seed] = train_one_seed(params, seed, train_set, test_set, runtime, tracker)
                    tracker.log_model(model, example)
                state = {k: v.cpu() for k, v in model.state_dict().items()}
                save_tensors(folder / paths.scratch_model(seed).name, state)
            transform = view_transform(params.preset, "scratch")
            card = model_card("scratch", params.model_name, model.config, test_set, transform, params.seeds)
            write_json(folder / MODEL_CARD, card)
        stage.log_artifact(write_histories(paths.HISTORY, "scratch", histories), "history")


if __name__ == "__main__":
    main()
