"""Stage evaluate: per-image test metrics of both arms over seeds, with baselines, sizes and counts.

Writes ``metrics/evaluate.json`` (the contract users diff across commits; keep its names stable)
and, for `dvc plots`, each arm's first-seed predictions as ``plots/confusion/<arm>.csv``.
"""

from __future__ import annotations

import csv
import io

import torch
from torch import nn

from pipeline import paths
from pipeline.config import Params, load_params
from pipeline.data import ImageSet, batch_preparer, load_split
from pipeline.engine import Evaluation, evaluate, extract_features
from pipeline.errors import stage_main
from pipeline.files import load_tensors, tensor_bytes, write_json, write_text
from pipeline.finetune_head import load_backbone
from pipeline.metrics import (
    collapse,
    confusion,
    majority_baseline,
    mean_per_class,
    per_class,
    pixels_logreg,
    spread,
)
from pipeline.model import ViT, count_parameters, vit_config
from pipeline.runtime import Runtime, resolve_runtime

MB = 2**20


def evaluate_scratch(params: Params, test_set: ImageSet, runtime: Runtime) -> tuple[dict[int, Evaluation], ViT]:
    model = ViT(vit_config(params.model_name, num_classes=len(test_set.classes))).to(runtime.device)
    results = {}
    for seed in params.seeds:
        model.load_state_dict(load_tensors(paths.scratch_model(seed)), strict=True)
        results[seed] = evaluate(
            model,
            test_set.images,
            test_set.labels,
            runtime,
            params.evaluate.batch_size,
            batch_preparer(test_set, False),
        )
    return results, model


def evaluate_pretrained(params: Params, test_set: ImageSet, runtime: Runtime) -> tuple[dict[int, Evaluation], ViT]:
    model = load_backbone(params, runtime)
    features = extract_features(
        model, test_set.images, runtime, params.evaluate.batch_size, batch_preparer(test_set, False)
    )
    model.reset_head(len(test_set.classes))
    results = {}
    for seed in params.seeds:
        state = load_tensors(paths.head_model(seed))
        head = nn.Linear(model.config.hidden_dim, len(test_set.classes))
        head.load_state_dict({"weight": state["heads.head.weight"], "bias": state["heads.head.bias"]})
        results[seed] = evaluate(head.to(runtime.device), features, test_set.labels, runtime, len(features))
    model.heads.head.load_state_dict(head.state_dict())
    return results, model


def summarise(results: dict[int, Evaluation], labels: torch.Tensor, classes: list[str], model: ViT,
              trainable: int) -> dict:  # fmt: skip
    evaluations = list(results.values())
    state = {k: v.cpu() for k, v in model.state_dict().items()}
    head = {k: v for k, v in state.items() if k.startswith("heads.")}
    return {
        "test_acc": spread([e.accuracy for e in evaluations]),
        "test_loss": spread([e.loss for e in evaluations]),
        "per_class": mean_per_class([per_class(labels, e.predictions, classes) for e in evaluations]),
        "collapse": sum(collapse(e.predictions) for e in evaluations) / len(evaluations),
        "file_size_mb": {"model": len(tensor_bytes(state)) / MB, "head": len(tensor_bytes(head)) / MB},
        "params": {"total": count_parameters(model), "trainable": trainable},
    }


def predictions_csv(labels: torch.Tensor, predictions: torch.Tensor, classes: list[str]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["actual", "predicted"])
    writer.writerows((classes[int(a)], classes[int(p)]) for a, p in zip(labels, predictions, strict=True))
    return buffer.getvalue()


@stage_main
def main() -> None:
    params = load_params()
    runtime = resolve_runtime(params.runtime)
    train_set = load_split(paths.prepared_split("scratch", "train"))
    test_set = load_split(paths.prepared_split("scratch", "test"))
    pretrained_test = load_split(paths.prepared_split("pretrained", "test"))
    classes, labels = test_set.classes, test_set.labels
    first = params.seeds[0]

    metrics = {"preset": params.preset, "n_train": len(train_set), "n_test": len(test_set), "classes": classes}
    matrices = {}
    scratch, scratch_model = evaluate_scratch(params, test_set, runtime)
    pretrained, pretrained_model = evaluate_pretrained(params, pretrained_test, runtime)
    head_params = pretrained_model.heads.head.weight.numel() + pretrained_model.heads.head.bias.numel()
    for arm, results, model, trainable in (
        ("scratch", scratch, scratch_model, count_parameters(scratch_model)),
        ("pretrained", pretrained, pretrained_model, head_params),
    ):
        metrics[arm] = summarise(results, labels, classes, model, trainable)
        matrices[arm] = {str(seed): confusion(labels, r.predictions, len(classes)) for seed, r in results.items()}
        write_text(paths.CONFUSION / f"{arm}.csv", predictions_csv(labels, results[first].predictions, classes))
    metrics["baselines"] = {
        "chance": 1 / len(classes),
        "majority": majority_baseline(train_set.labels, labels),
        "pixels_logreg": pixels_logreg(train_set.images, train_set.labels, test_set.images, labels),
    }
    metrics["runtime"] = runtime.describe()
    write_json(paths.METRICS / "evaluate.json", metrics)
    write_json(paths.CONFUSION / "matrices.json", {"classes": classes, "matrices": matrices})
    for arm in ("scratch", "pretrained"):
        acc = metrics[arm]["test_acc"]
        print(f"evaluate: {arm} test accuracy {acc['mean']:.4f} ± {acc['std']:.4f} over seeds {params.seeds}")
    print(f"evaluate: baselines {metrics['baselines']}")


if __name__ == "__main__":
    main()
