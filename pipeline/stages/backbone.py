"""Stage backbone: models/backbone.pt, our ViT's state dict, pretrained without the target task.

``offline``: supervised pretraining on the Fashion-MNIST classes that are not targets (AdamW,
warmup + cosine decay, gradient clipping, crop/flip augmentation). ``paper``: torchvision's
ImageNet ViT-B/16 weights, downloaded, hash-checked and loaded into our ViT with ``strict=True``.
"""

from __future__ import annotations

import time

from pipeline.core import paths
from pipeline.core.entry import stage_main
from pipeline.core.files import write_json, write_text
from pipeline.core.logs import stage_log as log
from pipeline.core.params_yaml import load_params
from pipeline.data import presets
from pipeline.pretrain.supervised import pretrain, torchvision_weights
from pipeline.results.history import POOL_FIELDS, history_csv
from pipeline.tracking.tracker import stage_tracker
from pipeline.train.checkpoints import save_state
from pipeline.train.runtime import resolve_runtime


@stage_main
def main() -> None:
    params = load_params()
    started = time.time()
    if presets.get(params.preset).has_pool:  # pretrained here on the held-out classes
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
