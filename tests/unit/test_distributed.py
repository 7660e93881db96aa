"""Training under torchrun (DistributedDataParallel, gloo on CPU): two processes give the weights one process
gives with the same global batch, only rank 0 writes, and a killed rank ends the job without an output."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from project_copy import clean_env

from pipeline.core.files import load_tensors

ROOT = Path(__file__).resolve().parents[2]
TORCHRUN = shutil.which("torchrun", path=str(Path(sys.executable).parent))

# One training run of a tiny ViT with augmentation, warmup + cosine and clipping, on 43 images in batches of
# 10 (the last batch of each epoch has 3 images: shards of 2 and 1). Rank 0 saves the weights and records.
SCRIPT = """
import os, signal, sys
import torch
from pipeline.core.config import RuntimeConfig
from pipeline.data.images import ImageSet, batch_preparer
from pipeline.train.schedule import Recipe, epoch_steps
from pipeline.train.loop import Recording, train
from pipeline.core.entry import stage_main
from pipeline.core.files import save_tensors
from pipeline.models.vit import ViT, vit_config
from pipeline.train.runtime import resolve_runtime, seed_everything

@stage_main
def main():
    runtime = resolve_runtime(RuntimeConfig(device="cpu", precision="fp32", threads=1, distributed="auto"))
    data = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (43, 3, 32, 32), dtype=torch.uint8, generator=data)
    labels = torch.arange(43) % 3
    image_set = ImageSet(images, labels, ["a", "b", "c"], (0.5,) * 3, (0.25,) * 3)
    generator = seed_everything(0)
    model = ViT(vit_config("tiny", num_classes=3))
    recipe = Recipe(lr=2e-3, batch_size=10, steps=epoch_steps(2, 43, 10), optimizer="adamw", weight_decay=0.05,
                    schedule="cosine", warmup_fraction=0.1, grad_clip=1.0)
    prepare = batch_preparer(image_set, augment_train=True)
    kill_at = int(os.environ.get("KILL_RANK_1_AT_STEP", "0"))
    calls = []

    def prepare_or_die(inputs, training, generator):
        calls.append(1)
        if kill_at and runtime.rank == 1 and len(calls) == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return prepare(inputs, training, generator)

    history = train(model, images, labels, recipe, runtime, generator, prepare=prepare_or_die,
                    recording=Recording(5, {"test": (images[:20], labels[:20])}, eval_batch_size=8))
    save_tensors(sys.argv[1], {"state": model.state_dict(), "history": history, "world": runtime.world_size})

main()
"""

pytestmark = pytest.mark.skipif(TORCHRUN is None, reason="torchrun is not installed")


def run_training(tmp_path: Path, processes: int, out: str, **env_extra: str) -> subprocess.CompletedProcess:
    script = tmp_path / "train_once.py"
    script.write_text(SCRIPT)
    env = {**clean_env(), "PYTHONPATH": str(ROOT), **env_extra}
    if processes == 1:
        command = [sys.executable, str(script), out]
    else:
        command = [TORCHRUN, "--standalone", f"--nproc_per_node={processes}", str(script), out]
    return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_two_gloo_processes_train_the_weights_of_one_process_with_the_same_global_batch(tmp_path):
    single = run_training(tmp_path, 1, "one.pt")
    assert single.returncode == 0, single.stderr[-3000:]
    double = run_training(tmp_path, 2, "two.pt")
    assert double.returncode == 0, double.stderr[-3000:]
    one, two = load_tensors(tmp_path / "one.pt"), load_tensors(tmp_path / "two.pt")
    assert (one["world"], two["world"]) == (1, 2)
    # fp32 sums in another order (two shards and an all-reduce instead of one batch) differ by ~1e-7 relative
    # per step; measured after 10 Adam steps: at most 3e-6 on weights that moved ~1e-2 and reach 0.3.
    # Except the attention's key bias: softmax ignores it, so its gradient is rounding noise around 0, which
    # Adam's normalisation turns into steps of up to the lr in either direction (measured: 8e-5 apart).
    for name, weight in one["state"].items():
        other = two["state"][name]
        if name.endswith("self_attention.in_proj_bias"):
            hidden = weight.numel() // 3  # [query | key | value]
            keep = torch.cat([torch.arange(hidden), torch.arange(2 * hidden, 3 * hidden)])
            weight, other = weight[keep], other[keep]
        torch.testing.assert_close(other, weight, rtol=0, atol=1e-5, msg=name)
    assert [r["step"] for r in two["history"]] == [r["step"] for r in one["history"]] == [5, 10]
    for a, b in zip(one["history"], two["history"], strict=True):
        assert b["train_acc"] == a["train_acc"] and b["test_acc"] == a["test_acc"]  # every image counted once
        assert b["train_loss"] == pytest.approx(a["train_loss"], rel=1e-5)
    # the weights really moved, so the agreement is not that of two untrained models
    initial = untrained()
    assert max((w - initial[k]).abs().max().item() for k, w in one["state"].items()) > 1e-3


def untrained() -> dict:
    """SCRIPT's model before training, built the same way."""
    from pipeline.models.vit import ViT, vit_config
    from pipeline.train.runtime import seed_everything

    seed_everything(0)
    return ViT(vit_config("tiny", num_classes=3)).state_dict()


@pytest.mark.slow
def test_a_rank_killed_mid_run_ends_the_job_without_an_output(tmp_path):
    result = run_training(tmp_path, 2, "never.pt", KILL_RANK_1_AT_STEP="4")
    assert result.returncode != 0, result.stderr[-3000:]
    assert not (tmp_path / "never.pt").exists() and not list(tmp_path.glob("*.tmp"))
    # rank 0 says in one line why it stops, and torchrun's summary names the rank that died and how
    assert (
        "error in stage train_once (rank 0 of 2): torchrun stopped this process because another rank failed"
        in result.stderr
        or "another process of this torchrun job stopped" in result.stderr
    ), result.stderr[-3000:]
    assert "rank      : 1" in result.stderr and "SIGKILL" in result.stderr, result.stderr[-3000:]
