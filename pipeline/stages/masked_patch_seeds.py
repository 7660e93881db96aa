"""Stage masked_patch_seeds: the default backbone's recipe (stage masked_patch) at ``masked_patch.extra_seeds``,
so that the transfer arms' intervals on the curve hold the pretraining's variance (issue 37): the curve's seed i
uses backbone i mod k, k = 1 + len(extra_seeds), backbone 0 the masked_patch stage's. Each backbone is saved as
``models/masked_patch_seeds/backbone_<i>.pt`` (i from 1; ``seeds.json`` there names each one's seed) and scored
by the same few-shot probe as stage masked_patch (``metrics/pretraining_scale/vit_masked_patch_seeds.json``).
With no extra seed (the run before issue 37's, and the paper preset, whose backbone is ImageNet's) the folder holds
``seeds.json`` alone.
"""

from __future__ import annotations

import dataclasses

from pipeline.core import paths
from pipeline.core.entry import stage_main
from pipeline.core.errors import UserError
from pipeline.core.files import atomic_dir, write_json
from pipeline.core.params_yaml import load_params
from pipeline.pretrain.masked_prediction import masked_patch_inputs, pretrain_scored, trunk_scorer
from pipeline.tracking.tracker import stage_tracker
from pipeline.train.checkpoints import save_state
from pipeline.train.runtime import resolve_runtime

OUTPUT = paths.METRICS / "pretraining_scale" / "vit_masked_patch_seeds.json"


@stage_main
def main() -> None:
    params = load_params()
    cfg, records = params.masked_patch, {}
    with atomic_dir(paths.MASKED_PATCH_SEEDS) as folder:
        if cfg.extra_seeds:
            runtime, shots = resolve_runtime(params.runtime), params.pretraining_scale.shots
            if runtime.world_size > 1:
                raise UserError("masked_patch_seeds trains in one process; run it without torchrun")
            unlabeled, target = masked_patch_inputs(max(shots), pool_only=False)
            score = trunk_scorer(target, shots, params.seeds, params.data_hunger.probe_regs, runtime,
                                 params.evaluate.batch_size)  # fmt: skip
        for index, seed in enumerate(cfg.extra_seeds, start=1):
            seeded = dataclasses.replace(cfg, seed=seed)
            with stage_tracker(params, f"masked_patch_seed{seed}", seed=seed, runtime=runtime,
                               arch="vit_masked_patch") as tracker:  # fmt: skip
                vit, records[str(seed)] = pretrain_scored(params.offline.model, seeded, unlabeled, len(target.classes),
                                                          runtime, tracker, score)  # fmt: skip
            save_state(folder / paths.masked_patch_seed(index).name, {k: v.cpu() for k, v in vit.state_dict().items()})
        # which seed each file holds; the folder is never empty (DVC warns on an empty output)
        write_json(
            folder / "seeds.json", {paths.masked_patch_seed(i).name: seed for i, seed in enumerate(cfg.extra_seeds, 1)}
        )
    write_json(OUTPUT, {"seeds": [cfg.seed, *cfg.extra_seeds], "extra": records})


if __name__ == "__main__":
    main()
