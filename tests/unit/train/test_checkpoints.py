"""pipeline.train.checkpoints: every model is saved and loaded there, and a bad checkpoint or model card fails in one
line that names the file and the stage to rerun (never a TypeError, never a silently mislabelled prediction)."""

from __future__ import annotations

import json

import pytest
import torch
from PIL import Image
from tiny_project import CLASSES, CPU, SEEDS, random_vit, run_cli

from pipeline.core import paths
from pipeline.core.errors import UserError
from pipeline.core.files import save_tensors
from pipeline.models.vit import ViT, vit_config
from pipeline.tools import predict
from pipeline.train import checkpoints


def one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert "\n" not in message
    return message


def test_saved_models_load_back_as_they_were(project):
    model = random_vit(5, len(CLASSES))
    checkpoints.save_scratch(paths.SCRATCH_MODELS, 0, model)
    loaded = checkpoints.load_scratch("tiny", len(CLASSES), 0, CPU)
    state, back = model.state_dict(), loaded.state_dict()
    assert state.keys() == back.keys() and all(torch.equal(state[k], back[k]) for k in state)
    head = torch.nn.Linear(model.config.hidden_dim, len(CLASSES))
    checkpoints.save_head(paths.LINEAR_PROBES, 0, head)
    torch.testing.assert_close(checkpoints.load_head(0, model.config.hidden_dim, len(CLASSES)).weight, head.weight)


@pytest.mark.parametrize("content", [torch.zeros(3), [torch.zeros(3)], {"a": 1}], ids=["tensor", "list", "numbers"])
def test_a_checkpoint_that_is_no_state_dict_names_the_file_and_the_stage(project, content):
    save_tensors(paths.scratch_model(0), content)
    with pytest.raises(UserError) as error:
        checkpoints.load_scratch("tiny", len(CLASSES), 0, CPU)
    message = one_line(error)
    assert str(paths.scratch_model(0)) in message and "is not a state dict" in message
    assert "rerun `dvc repro -f train_scratch`" in message


def test_a_backbone_that_is_a_bare_tensor_names_its_stage(project):
    save_tensors(paths.BACKBONE, torch.zeros(3))
    with pytest.raises(UserError) as error:
        checkpoints.load_backbone("tiny", CPU, "supervised")
    assert str(paths.BACKBONE) in one_line(error) and "rerun `dvc repro -f backbone`" in str(error.value)


def test_a_head_without_the_heads_keys_names_the_missing_keys(project):
    head = torch.nn.Linear(8, 3)
    save_tensors(paths.linear_probe(0), head.state_dict())  # "weight", "bias": not the names inside the ViT
    with pytest.raises(UserError) as error:
        checkpoints.load_head(0, 8, 3)
    message = one_line(error)
    assert str(paths.linear_probe(0)) in message and "heads.head.weight" in message
    assert "rerun `dvc repro -f linear_probe`" in message


def test_a_scratch_checkpoint_of_another_shape_says_what_does_not_fit(project):
    save_tensors(paths.scratch_model(0), random_vit(0, 5).state_dict())  # 5 classes where the task has 3
    with pytest.raises(UserError) as error:
        checkpoints.load_scratch("tiny", len(CLASSES), 0, CPU)
    message = one_line(error)
    assert "does not fit model 'tiny' with 3 classes" in message and "heads.head.weight" in message


def card_with(folder, **changes) -> None:
    card = json.loads((folder / checkpoints.MODEL_CARD).read_text())
    for key, value in changes.items():
        if key == "in_channels":
            card["model"]["in_channels"] = value
        else:
            card[key] = value
    (folder / checkpoints.MODEL_CARD).write_text(json.dumps(card))


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"model_name": "B/15"}, "model_name 'B/15' is not a known ViT preset"),
        ({"seeds": []}, "seeds must list the trained seeds, got []"),
        ({"in_channels": 1}, "mean [0.5, 0.5, 0.5] and std [0.25, 0.25, 0.25] need one value per input channel (1)"),
        ({"classes": ["Pullover", "Coat"]}, "2 classes ['Pullover', 'Coat'] for a model with 3 outputs"),
    ],
    ids=["unknown-model", "no-seeds", "grey-model-rgb-mean", "fewer-classes"],
)
def test_a_bad_model_card_fails_in_one_line_naming_the_file_and_the_fix(project, changes, problem):
    card_with(paths.SCRATCH_MODELS, **changes)
    with pytest.raises(UserError) as error:
        checkpoints.read_model_card(paths.SCRATCH_MODELS)
    message = one_line(error)
    assert message.startswith(f"{paths.SCRATCH_MODELS / checkpoints.MODEL_CARD}: ") and problem in message
    assert message.endswith("rerun `dvc repro -f train_scratch`")


def test_a_card_whose_classes_are_reordered_against_the_prepared_data_is_refused(project):
    (paths.PREPARED / "info.json").write_text(json.dumps({"classes": CLASSES}))
    assert checkpoints.read_model_card(paths.LINEAR_PROBES)["classes"] == CLASSES
    card_with(paths.LINEAR_PROBES, classes=list(reversed(CLASSES)))
    with pytest.raises(UserError) as error:
        checkpoints.read_model_card(paths.LINEAR_PROBES)
    message = one_line(error)
    assert "are in another order than the prepared data's ['Pullover', 'Coat', 'Shirt']" in message
    assert "mislabelled" in message and message.endswith("rerun `dvc repro -f linear_probe`")
    (paths.PREPARED / "info.json").unlink()  # a teammate with models/ only: nothing to compare with
    assert checkpoints.read_model_card(paths.LINEAR_PROBES)["classes"] == list(reversed(CLASSES))


def test_a_damaged_prepared_info_is_one_line_naming_it(project):
    (paths.PREPARED / "info.json").write_text('{"classes": ["Pullover", "Co')  # truncated: a full disk, a kill
    with pytest.raises(UserError) as error:
        checkpoints.read_model_card(paths.LINEAR_PROBES)
    assert f"{paths.PREPARED / 'info.json'} is not valid JSON" in one_line(error)
    (paths.PREPARED / "info.json").unlink()


def test_predict_reports_a_bad_card_in_one_line(project, monkeypatch, capsys):
    card_with(paths.SCRATCH_MODELS, model_name="B/15")
    Image.new("RGB", (8, 8)).save(project / "a.png")  # predict names a missing image before it reads the card
    status, out, err = run_cli(predict, monkeypatch, capsys, "a.png", "--model", "scratch")
    assert status == 1 and out == "" and len(err.strip().splitlines()) == 1
    assert "model_name 'B/15'" in err and "dvc repro -f train_scratch" in err and "Traceback" not in err


def test_the_cards_the_stages_write_pass_the_check(project):
    for arm, folder in checkpoints.CARD_FOLDERS.items():
        card = checkpoints.read_model_card(folder)
        assert card["arm"] == arm and card["seeds"] == SEEDS


def test_finetune_model_keeps_the_backbone_and_adds_a_zero_head():
    torch.manual_seed(0)
    backbone = ViT(vit_config("tiny", num_classes=10))
    model = checkpoints.finetune_model(backbone, 3)
    assert model.heads.head.weight.shape == (3, 32) and not model.heads.head.weight.any()
    assert torch.equal(model.conv_proj.weight, backbone.conv_proj.weight)
    assert all(p.requires_grad for p in model.parameters())
