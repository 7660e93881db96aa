"""Stage backbone: models/backbone.pt, our ViT's state dict, pretrained without the target task.

``offline``: supervised pretraining on the Fashion-MNIST classes that are not targets (AdamW,
warmup + cosine decay, gradient clipping, crop/flip augmentation). ``paper``: torchvision's
ImageNet ViT-B/16 weights, downloaded, hash-checked and loaded into our ViT with ``strict=True``.
"""

from __future__ import annotations

import time
from pathlib import Path

from pipeline import paths
from pipeline.config import Params, load_params
from pipeline.data import batch_preparer, load_split
from pipeline.engine import Recipe, train
from pipeline.errors import UserError, stage_main
from pipeline.fetch import download
from pipeline.files import load_tensors, save_tensors, write_json, write_text
from pipeline.history import history_csv
from pipeline.model import ViT, count_parameters, state_dict_mismatch, vit_config
from pipeline.runtime import resolve_runtime, seed_everything
from pipeline.tracking import stage_tracker


def pretrain(params: Params) -> tuple[dict, list[dict], dict]:
    pool_train, pool_test = load_split(paths.PREPARED / "pool_train.pt"), load_split(paths.PREPARED / "pool_test.pt")
    runtime = resolve_runtime(params.runtime)
    cfg = params.backbone
    generator = seed_everything(cfg.seed)
    model = ViT(vit_config(params.offline.model, num_classes=len(pool_train.classes))).to(runtime.device)
    recipe = Recipe(
        lr=cfg.lr, batch_size=cfg.batch_size, epochs=cfg.epochs, optimizer="adamw", weight_decay=cfg.weight_decay,
        schedule="cosine", warmup_fraction=cfg.warmup_fraction, grad_clip=cfg.grad_clip,
    )  # fmt: skip
    with stage_tracker(params, "backbone", seed=cfg.seed, runtime=runtime, source="pretrain") as tracker:

        def report(record: dict) -> None:
            tracker.log_metrics({k: v for k, v in record.items() if k != "epoch"}, step=record["epoch"])
            print(
                f"backbone epoch {record['epoch']}: "
                + ", ".join(f"{k} {v:.4f}" for k, v in record.items() if k != "epoch")
            )

        history = train(
            model, pool_train.images, pool_train.labels, recipe, runtime, generator,
            prepare=batch_preparer(pool_train, cfg.augment),
            test_inputs=pool_test.images, test_labels=pool_test.labels, on_epoch=report, description="backbone",
        )  # fmt: skip
    state = {k: v.cpu() for k, v in model.state_dict().items()}
    summary = {
        "source": "pretrain",
        "pool_classes": pool_train.classes,
        "n_pretrain": len(pool_train),
        "pool_test_acc": history[-1]["test_acc"],
        "pool_test_loss": history[-1]["test_loss"],
        "params": count_parameters(model),
    }
    return state, history, summary


def torchvision_weights(params: Params) -> tuple[dict, list[dict], dict]:
    cfg = params.paper
    path = download(cfg.weights_url, paths.DOWNLOADS / Path(cfg.weights_url).name, cfg.weights_sha256)
    state = load_tensors(path)
    head = state.get("heads.head.weight")
    model = ViT(vit_config(cfg.backbone_model, num_classes=head.shape[0] if head is not None else 1000))
    try:
        model.load_state_dict(state, strict=True)  # torchvision's legacy MLP names load too (model.MLPBlock)
    except RuntimeError:
        raise UserError(
            f"the weights at {cfg.weights_url} do not fit paper.backbone_model {cfg.backbone_model!r} "
            f"({state_dict_mismatch(model, state)}); check that paper.weights_url and paper.backbone_model "
            "name the same architecture"
        ) from None
    summary = {"source": "torchvision", "url": cfg.weights_url, "params": count_parameters(model)}
    return model.state_dict(), [], summary


@stage_main
def main() -> None:
    params = load_params()
    started = time.time()
    state, history, summary = pretrain(params) if params.preset == "offline" else torchvision_weights(params)
    save_tensors(paths.BACKBONE, state)
    write_text(paths.HISTORY / "backbone.csv", history_csv(history))
    write_json(paths.METRICS / "backbone.json", summary)
    print(f"backbone: {summary['source']}, {summary['params']:,} parameters, {time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
