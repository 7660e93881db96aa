"""Stage backbone: models/backbone.pt, our ViT's state dict, pretrained without the target task.

``offline``: supervised pretraining on the Fashion-MNIST classes that are not targets (AdamW,
warmup + cosine decay, gradient clipping, crop/flip augmentation). ``paper``: torchvision's
ImageNet ViT-B/16 weights, downloaded, hash-checked and loaded into our ViT with ``strict=True``.
"""

from __future__ import annotations

import time

from pipeline import paths
from pipeline.checkpoints import save_state
from pipeline.config import load_params
from pipeline.errors import stage_main
from pipeline.files import write_json, write_text
from pipeline.history import POOL_FIELDS, history_csv
from pipeline.logs import stage_log as log
from pipeline.pretraining import pretrain, torchvision_weights
from pipeline.runtime import resolve_runtime
from pipeline.tracking import stage_tracker


@stage_main
def main() -> None:
    params = load_params()
    started = time.time()
    if params.preset == "offline":
        runtime = resolve_runtime(params.runtime)
        cfg = params.backbone
        with stage_tracker(params, "backbone", seed=cfg.seed, runtime=runtime, source="pretrain") as tracker:
            state, history, summary = pretrain(cfg, params.offline.model, runtime, params.evaluate.batch_size, tracker)
    else:
        state, history, summary = torchvision_weights(params.paper)
    save_state(paths.BACKBONE, state)
    write_text(paths.HISTORY / "backbone.csv", history_csv(history, POOL_FIELDS))
    write_json(paths.METRICS / "backbone.json", summary)
    log.info(f"backbone: {summary['source']}, {summary['params']:,} parameters, {time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
