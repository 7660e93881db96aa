"""Stage masked_patch: the paper's self-supervised pilot (section 4.6), a ViT pretrained by masked patch
prediction on the unlabeled training images of all ten classes (the pool's and the target's, less the target's
validation images; never a test image), then scored like the pretraining-size axis: few-shot probe on the
target classes (its mean patch token as features) at ``pretraining_scale.shots``. The go/no-go rule was written
in params.yaml (``masked_patch.decision_shots``) before its first run; ``pretraining_scale`` applies it.
Offline preset only.

``python -m pipeline.stages.masked_patch pool`` (dvc stage ``masked_patch_pool``): the same recipe on the pool's
42,000 images alone, no target-class image (as the supervised backbone), scored by the same probe, its model
not kept: what the target classes' unlabeled images add to the default backbone, measured, not assumed.

``python -m pipeline.stages.masked_patch long`` (dvc stage ``masked_patch_long``): issue 21's pre-registered
stretch, the default's images and recipe for ``masked_patch.stretch_epochs`` (its schedule spanning them all),
scored by the same probe, its model not kept; ``pretraining_scale`` applies its rule.

The same recipe at more seeds (the curve's backbone variance) is stage masked_patch_seeds.
"""

from __future__ import annotations

import dataclasses
import sys

from pipeline.core import paths
from pipeline.core.entry import stage_main
from pipeline.core.errors import UserError
from pipeline.core.files import write_json
from pipeline.core.params_yaml import load_params
from pipeline.data import presets
from pipeline.pretrain.masked_prediction import masked_patch_inputs, pretrain_scored, trunk_scorer
from pipeline.tracking.tracker import stage_tracker
from pipeline.train.checkpoints import save_state
from pipeline.train.runtime import resolve_runtime

# the transfer arms' backbone (pool + target images), its pool-only twin and its longer-trained stretch
OUTPUTS = {"all": paths.METRICS / "pretraining_scale" / "vit_masked_patch.json",
           "pool": paths.METRICS / "pretraining_scale" / "vit_masked_patch_pool.json",
           "long": paths.METRICS / "pretraining_scale" / "vit_masked_patch_long.json"}  # fmt: skip
RUN_NAMES = {"all": "masked_patch", "pool": "masked_patch_pool", "long": "masked_patch_long"}
MODEL = paths.MASKED_PATCH


@stage_main
def main() -> None:
    params = load_params()
    if sys.argv[1:] not in ([], ["pool"], ["long"]):
        raise UserError(f"usage: python -m pipeline.stages.masked_patch [pool|long], got {sys.argv[1:]}")
    variant = sys.argv[1] if sys.argv[1:] else "all"
    if not presets.get(params.preset).has_pool:
        if variant == "all":
            save_state(MODEL, {})
        write_json(OUTPUTS[variant], {"preset": params.preset, "skipped": "the paper preset's backbone is ImageNet's"})
        return
    runtime, cfg, batch = resolve_runtime(params.runtime), params.masked_patch, params.evaluate.batch_size
    if variant == "long":
        cfg = dataclasses.replace(cfg, epochs=cfg.stretch_epochs)
    if runtime.world_size > 1:
        raise UserError("masked_patch trains in one process; run it without torchrun (`dvc repro masked_patch`)")
    # "pool" leaves out every target-class image, as the supervised backbone
    unlabeled, target = masked_patch_inputs(max(params.pretraining_scale.shots), pool_only=variant == "pool")
    score = trunk_scorer(target, params.pretraining_scale.shots, params.seeds, params.data_hunger.probe_regs, runtime,
                         batch)  # fmt: skip
    with stage_tracker(params, RUN_NAMES[variant], seed=cfg.seed, runtime=runtime, arch="vit_masked_patch") as tracker:
        vit, record = pretrain_scored(params.offline.model, cfg, unlabeled, len(target.classes), runtime, tracker,
                                      score)  # fmt: skip
    if variant == "all":
        save_state(MODEL, {k: v.cpu() for k, v in vit.state_dict().items()})
    write_json(OUTPUTS[variant], record | ({"images": "pool"} if variant == "pool" else {}))


if __name__ == "__main__":
    main()
