"""pipeline.pretrain.synthetic_backbones: the same steps at every size, the best held-out score's weights kept."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from helpers import CPU, params_with

from pipeline.core.errors import UserError
from pipeline.data.images import ImageSet
from pipeline.pretrain import synthetic_backbones as synthetic
from pipeline.pretrain.synthetic_backbones import arch_and_point, load_synthetic, pretrain_synthetic, state_of
from pipeline.train.loop import evaluate


def fractal_like(n: int, seed: int) -> ImageSet:
    generator = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (n, 1, 28, 28), dtype=torch.uint8, generator=generator)
    return ImageSet(images, torch.arange(n) % 4, [f"fractal_{c}" for c in range(4)], (0.2,), (0.3,))


@pytest.mark.parametrize("arch", ["vit", "resnet"])
def test_the_kept_weights_are_those_of_the_best_held_out_score(arch, tmp_path, monkeypatch):
    cfg = dataclasses.replace(params_with().backbone, batch_size=8, lr=0.01)
    held_out = fractal_like(16, 1)
    seen = []
    model, history, best = pretrain_synthetic(arch, "fmnist", (4, 8, 8, 8), (fractal_like(24, 0), held_out), cfg,
                                              steps=6, scores=3, runtime=CPU, eval_batch_size=16,
                                              on_record=seen.append)  # fmt: skip
    assert [r["step"] for r in history] == [2, 4, 6] and seen == history
    assert best["held_out_acc"] == max(r["held_out_acc"] for r in history)
    assert best is next(r for r in history if r["held_out_acc"] == best["held_out_acc"])  # the first of equals
    kept = evaluate(model, held_out.images, held_out.labels, CPU, 16, lambda x, train, g: held_out.normalise(x))
    assert kept.accuracy == best["held_out_acc"] and kept.loss == pytest.approx(best["held_out_loss"], rel=1e-5)
    monkeypatch.chdir(tmp_path)
    synthetic.model_path(arch, 1).parent.mkdir(parents=True)
    torch.save(state_of(model), synthetic.model_path(arch, 1))
    loaded = load_synthetic(arch, 1, "fmnist", (4, 8, 8, 8), 4, CPU)
    assert not any(p.requires_grad for p in loaded.parameters()) and not loaded.training
    pairs = zip(loaded.state_dict().values(), model.state_dict().values(), strict=True)
    assert all(torch.equal(a, b) for a, b in pairs)


def test_bad_arguments_name_the_usage():
    assert arch_and_point(["resnet", "2"], [0, 1, 2], "synthetic_pretrain") == ("resnet", 2)
    for argv in (["vit"], ["cnn", "0"], ["vit", "3"], ["vit", "x"]):
        with pytest.raises(UserError, match=r"usage: python -m pipeline.stages.synthetic_pretrain <arch: vit\|resnet>"):
            arch_and_point(argv, [0, 1, 2], "synthetic_pretrain")
