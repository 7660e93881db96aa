"""pipeline.core.config: params.yaml parsed once into frozen sections; every bad key or value named."""

from __future__ import annotations

import dataclasses
import re

import pytest
import yaml
from helpers import ROOT, committed_params, params_with, raw_params, with_value
from project_copy import merged

from pipeline.core import arm_registry as arms
from pipeline.core import config as config_module
from pipeline.core.config import Params
from pipeline.core.errors import ConfigError
from pipeline.core.params_yaml import flatten, load_params, parse_params

# --- config ----------------------------------------------------------------------------------


def test_committed_params_yaml_parses_to_exactly_its_values():
    params = load_params(ROOT / "params.yaml")
    flat = flatten(params)
    # every value written in the file must arrive unchanged (not silently replaced by a default)

    def leaves(prefix: str, value, parsed) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                leaves(f"{prefix}.{key}" if prefix else key, item, getattr(parsed, key))
        else:
            expected = float(value) if isinstance(parsed, float) else value
            assert flat[prefix] == str(expected), prefix

    leaves("", committed_params(), params)  # the file itself, not raw_params()


def test_config_knows_exactly_the_model_presets():
    from pipeline.core.config import MODEL_NAMES
    from pipeline.models.vit import PRESETS

    assert sorted(MODEL_NAMES) == sorted(PRESETS)


def test_config_has_no_defaults_of_its_own():
    """params.yaml is the one source of values: no field of any section has a default in code."""

    def fields_with_defaults(cls) -> list[str]:
        found = []
        for f in dataclasses.fields(cls):
            if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
                found.append(f"{cls.__name__}.{f.name}")
            if isinstance(f.type, str) and f.type in vars(config_module):
                found += fields_with_defaults(vars(config_module)[f.type])
        return found

    assert fields_with_defaults(Params) == []


@pytest.mark.parametrize(
    ("dotted", "value", "allowed"),
    [
        ("train_scratch.offline.lr", -0.1, "must be positive"),
        ("linear_probe.offline.lr", 0, "must be positive"),
        ("train_scratch.offline.batch_size", 0, "at least 1"),
        ("evaluate.batch_size", 0, "at least 1"),
        ("backbone.epochs", 0, "at least 1"),
        ("backbone.warmup_fraction", 1.5, "[0, 1)"),
        ("backbone.grad_clip", -1, "must not be negative"),
        ("train_scratch.offline.optimizer", "sgd", "adam, adamw"),
        ("train_scratch.offline.schedule", "step", "none, cosine"),
        ("runtime.device", "tpu", "auto, cpu, cuda, mps"),
        ("runtime.precision", "fp16", "auto, bf16, fp32"),
        ("data_hunger.finetune.optimizer", "sgd", "adam, adamw"),
        ("data_hunger.cnn.lrs", [0.001, 0], "must list positive, finite learning rates"),
        ("data_hunger.primary_comparisons", ["linear-vit"], "comparisons '<arm>-<arm>' of the arms"),
        ("data_hunger.primary_comparisons", ["scratch-scratch"], "comparisons '<arm>-<arm>' of the arms"),
        ("data_hunger.primary_comparisons", [], "must name one or more"),
        ("data_hunger.primary_points", [-1], "indices into the size lists (0 or more)"),
        ("data_hunger.primary_points", [], "indices into the size lists"),
        ("data_hunger.probe_regs", [], "must list positive, finite ridge strengths"),
        ("data_hunger.patience", 0, "at least 1"),
        ("data_hunger.plateau_window", 0, "must be at least 1 and at most half of data_hunger.scores (40)"),
        ("data_hunger.plateau_window", 21, "at most half of data_hunger.scores (40), got 21"),
        ("data_hunger.plateau_score", "auc", "loss, accuracy"),
        ("seeds", [-1], "must be seeds from 0 to 4294967295"),
        ("seeds", [4294967296], "must be seeds from 0 to 4294967295"),
        ("backbone.seed", -3, "must be seeds from 0 to 4294967295"),
        ("masked_patch.seed", 2**40, "must be seeds from 0 to 4294967295"),
        ("masked_patch.stretch_epochs", 3, "must be more than masked_patch.epochs (3)"),
        ("masked_patch.stretch_shots", 7, "must be one of pretraining_scale.shots"),
        ("data_hunger.patience", 40, "must be below data_hunger.scores"),
        ("data_hunger.scratch.lrs", [0.003, 0.001], "must be in increasing order"),
        ("data_hunger.probe_regs", [1.0, 0.1], "must be in increasing order"),
        ("validation.paper_per_class", 0, "at least 1"),
        ("validation.offline_per_class", 6000, "must leave training images"),
        ("preset", "imagenet", "offline, paper"),
        ("offline.model", "ViT-B/16", "'B/16'"),
        ("paper.backbone_model", "tinyy", "'tiny'"),
        ("offline.classes", ["Coat", "Hat"], "'Ankle boot'"),
        ("offline.train_per_class", 0, "between 1 and 6000"),
        ("paper.url", "ftp://example.com/data.zip", "https, http or file"),
        ("paper.weights_url", "example.com/w.pth", "https, http or file"),
        ("paper.sha256", "5e9596fc", "64 lowercase hex"),
        ("paper.sha256", "Z" * 64, "64 lowercase hex"),
        ("seeds", [1, 1], "must not repeat"),
        ("seeds", [], "at least one seed"),
    ],
)
def test_out_of_range_value_names_the_key_and_what_is_allowed(dotted, value, allowed):
    with pytest.raises(ConfigError) as caught:
        parse_params(with_value(raw_params(), dotted, value))
    assert dotted in str(caught.value)
    assert allowed in str(caught.value)


def test_repeated_offline_class_is_rejected():
    with pytest.raises(ConfigError, match=r"offline\.classes"):
        parse_params(with_value(raw_params(), "offline.classes", ["Coat", "Coat", "Shirt"]))


@pytest.mark.parametrize(
    ("dotted", "value"),
    [
        ("paper.url", "https"),
        ("train_scratch.offline.lr", float("inf")),
        ("train_scratch.offline.weight_decay", float("inf")),
    ],
)
def test_degenerate_values_are_rejected(dotted, value):
    with pytest.raises(ConfigError, match=re.escape(dotted)):
        parse_params(with_value(raw_params(), dotted, value))


def test_params_are_frozen():
    params = parse_params(raw_params())
    with pytest.raises(dataclasses.FrozenInstanceError):
        params.train_scratch.offline.lr = 1.0  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        params.preset = "paper"  # type: ignore[misc]


def test_the_paper_preset_trains_exactly_as_seed_000():
    """Seed 000: Adam, betas (0.9, 0.999), lr 3e-3, weight decay 0.3, batch 32, 5 epochs, dropout 0.1 (Table 3);
    the pretrained head Adam at lr 1e-3, batch 32, 10 epochs. The paper preset must read exactly these."""
    params = parse_params(with_value(raw_params(), "preset", "paper"))
    scratch, head = params.scratch_recipe, params.head_recipe
    assert (scratch.optimizer, scratch.lr, scratch.weight_decay, scratch.batch_size, scratch.epochs) == (
        "adam",
        0.003,
        0.3,
        32,
        5,
    )
    assert (scratch.dropout, scratch.schedule, scratch.warmup_fraction, scratch.grad_clip, scratch.augment) == (
        0.1,
        "none",
        0.0,
        0.0,
        False,
    )
    assert (head.optimizer, head.lr, head.weight_decay, head.batch_size, head.epochs) == ("adam", 0.001, 0.0, 32, 10)
    assert (head.schedule, head.warmup_fraction, head.grad_clip) == ("none", 0.0, 0.0)
    assert params.model_name == params.backbone_model_name == "B/16"


def test_each_preset_reads_its_own_recipe():
    offline = parse_params(raw_params())
    assert offline.scratch_recipe is offline.train_scratch.offline and offline.head_recipe.epochs == 50


def test_the_budget_spans_max_epochs_but_never_fewer_than_min_steps_and_spreads_the_scores():
    from pipeline.core.params_yaml import load_params

    cfg = load_params().data_hunger
    steps, every = cfg.budget(30)  # 10 per class: one step an epoch
    assert steps == cfg.min_steps and every == -(-steps // cfg.scores)
    steps, every = cfg.budget(3000)  # 1000 per class
    assert steps == cfg.max_epochs * -(-3000 // cfg.batch_size) and steps // every <= cfg.scores


def test_a_plateau_schedule_may_run_to_cap_factor_budgets_and_a_cosine_one_to_its_budget():
    cosine = params_with(data_hunger={"scratch": {"schedule": "cosine"}}).data_hunger
    plateau = params_with(data_hunger={"cnn": {"schedule": "cosine"}, "cap_factor": 3}).data_hunger
    assert cosine.cap("scratch", 400) == 400 and plateau.cap("cnn", 400) == 400
    assert plateau.cap("scratch", 400) == 1200
    with pytest.raises(ConfigError, match=r"data_hunger.cooldown_fraction must be in \(0, 1\], got 0"):
        params_with(data_hunger={"cooldown_fraction": 0})
    with pytest.raises(ConfigError, match="data_hunger.cap_factor must be at least 1"):
        params_with(data_hunger={"cap_factor": 0})
    with pytest.raises(ConfigError, match="data_hunger.scratch.schedule"):
        params_with(data_hunger={"scratch": {"schedule": "step"}})


def test_config_rejects_bad_sweeps_and_matches_dvc_yaml():
    with pytest.raises(ConfigError, match="data_hunger.offline_sizes must be strictly increasing"):
        params_with(data_hunger={"offline_sizes": [10, 10, 75, 250, 1000]})
    with pytest.raises(ConfigError, match=r"data_hunger.paper_fractions must list one value per sweep point \(5"):
        params_with(data_hunger={"paper_fractions": [0.5, 1.0]})
    with pytest.raises(ConfigError, match="data_hunger.points must be 0, 1, ..., n-1"):
        params_with(data_hunger={"points": [1, 2, 3, 4, 5]})
    with pytest.raises(ConfigError, match="data_hunger.paper_fractions must be in"):
        params_with(data_hunger={"paper_fractions": [0.1, 0.2, 0.3, 0.5, 1.5]})
    with pytest.raises(ConfigError, match="data_hunger.headline_point must be one of the points"):
        params_with(data_hunger={"headline_point": 5})
    with pytest.raises(ConfigError, match="data_hunger.scratch.lrs must not repeat"):
        params_with(data_hunger={"scratch": {"lrs": [0.001, 0.001]}})
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    for name, arm in arms.REGISTRY.items():  # an arm's own matrix over the points, or one it shares
        spec = stages[arm.dvc_stage]
        assert spec["matrix"] == {"point": "${data_hunger.points}"}
        assert re.fullmatch(r"python -m pipeline\.stages\.sweep \S+ \$\{item\.point\}", spec["cmd"])
        assert name in spec["cmd"].split()[3].split(",")
    assert stages["sweep_pretrained"]["cmd"] == "python -m pipeline.stages.sweep linear,finetune ${item.point}"
    assert "metrics/data_hunger" in stages["data_hunger"]["deps"]  # the folder of every item's point file
    names = sorted({arm.dvc_stage for arm in arms.REGISTRY.values()})
    outs = [next(iter(out)) for name in names for out in stages[name]["outs"]]
    assert all(out.startswith("metrics/data_hunger/") for out in outs)


@pytest.mark.parametrize("variants", [["sgd"], ["paper"], ["adamw", "adamw"], []])
def test_config_rejects_unknown_ablation_variants(variants):
    with pytest.raises(ConfigError, match="ablation.variants"):
        params_with(ablation={"variants": variants})


def test_unknown_preset_and_scheme_are_rejected_in_process(tmp_path):
    path = tmp_path / "params.yaml"
    for text, fragments in (
        ("preset: online\n", ["preset", "offline, paper", "'online'"]),
        ("paper:\n  url: ftp://example.invalid/a.zip\n", ["paper.url", "https, http or file", "ftp://"]),
        ("paper:\n  weights_url: javascript:alert(1)\n", ["paper.weights_url", "https, http or file"]),
        ("seeds: []\n", ["seeds", "at least one"]),
        ("paper:\n  max_extract_mb: 0\n", ["paper.max_extract_mb", "positive"]),
    ):
        path.write_text(yaml.safe_dump(merged(raw_params(), yaml.safe_load(text))))
        with pytest.raises(ConfigError) as caught:
            load_params(path)
        for fragment in fragments:
            assert fragment in str(caught.value)
    path.write_text(yaml.safe_dump(merged(raw_params(), {"paper": {"url": "file:///data/a.zip"}})))
    assert load_params(path).paper.url == "file:///data/a.zip"


def test_the_choice_seeds_and_pruning_are_checked():
    assert params_with(data_hunger={"choice_seeds": 3}).data_hunger.choice_seeds == 3
    with pytest.raises(ConfigError, match=r"data_hunger.choice_seeds must be at most the number of seeds \(2\)"):
        params_with(seeds=[0, 1], data_hunger={"choice_seeds": 3})
    with pytest.raises(ConfigError, match="data_hunger.choice_seeds must be at least 1"):
        params_with(data_hunger={"choice_seeds": 0})
    with pytest.raises(ConfigError, match="data_hunger.prune_z must be 0"):
        params_with(data_hunger={"prune_z": -1.0})
    assert params_with(data_hunger={"choice_keep": 2}).data_hunger.choice_keep == 2
    with pytest.raises(ConfigError, match="data_hunger.choice_keep must be 0"):
        params_with(data_hunger={"choice_keep": -1})
    with pytest.raises(ConfigError, match="data_hunger.monitor_per_class must be 0"):
        params_with(data_hunger={"monitor_per_class": -5})


def test_extra_backbone_seeds_pair_with_the_masked_patch_backbone_only_and_never_repeat():
    committed = parse_params(committed_params())
    assert committed.backbone_count == 3  # issue 37's rerun: three masked-patch backbones
    assert params_with().backbone_count == 1  # the tests' copies: one
    assert params_with(masked_patch={"extra_seeds": [1, 2]}).backbone_count == 3
    with pytest.raises(ConfigError, match=r"masked_patch.extra_seeds must not repeat a seed or masked_patch.seed"):
        params_with(masked_patch={"extra_seeds": [0, 1]})
    with pytest.raises(ConfigError, match="masked_patch.extra_seeds pairs the curve's seeds .* is supervised"):
        params_with(offline={"backbone": "supervised"}, masked_patch={"extra_seeds": [1]})
    with pytest.raises(ConfigError, match="masked_patch.extra_seeds must be seeds from 0"):
        params_with(masked_patch={"extra_seeds": [-1]})


@pytest.mark.parametrize("target", ["paper", "paper-20"])
def test_the_makefiles_paper_experiments_set_params_that_validate(tmp_path, target):
    """`make paper` and `make paper-20` run `dvc exp run -S ...` on the committed params: DVC's own override parser
    applied to a copy gives params that pass validation, with one backbone (the committed run pairs three)."""
    import shlex

    from dvc.utils.hydra import apply_overrides

    line = next(line for line in (ROOT / "Makefile").read_text().splitlines() if f"dvc exp run -n {target} " in line)
    words = shlex.split(
        line.split("dvc exp run", 1)[1]
        .replace("$(PAPER_20_URL)", "https://example.org/p.zip")
        .replace("$(PAPER_20_SHA256)", "0" * 64)
    )
    overrides = [words[i + 1] for i, word in enumerate(words) if word == "-S"]
    copy = tmp_path / "params.yaml"
    copy.write_text((ROOT / "params.yaml").read_text())
    apply_overrides(copy, overrides)
    params = load_params(copy)
    assert params.preset == "paper" and params.backbone_count == 1
    with pytest.raises(ConfigError, match=r"masked_patch.extra_seeds: \[\]"):  # without it: one message, the fix named
        apply_overrides(copy, ["masked_patch.extra_seeds=[1, 2]"])
        load_params(copy)
