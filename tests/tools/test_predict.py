"""Tool predict: class probabilities for image files, with one-line errors."""

from __future__ import annotations

import pytest
import torch
from helpers import png_claiming
from PIL import Image
from tiny_project import CLASSES, CPU, run_cli

from pipeline.core import paths
from pipeline.core.params_yaml import load_params
from pipeline.data.images import ImageSet, normalise, view_transform
from pipeline.tools import predict
from pipeline.train.checkpoints import CARD_FOLDERS, read_model_card

# --- predict ---------------------------------------------------------------------------------


def parse_line(line: str) -> tuple[str, list[tuple[str, float]]]:
    path, _, rest = line.rpartition(": ")
    words = rest.split()
    return path, [(words[i], float(words[i + 1])) for i in range(0, len(words), 2)]


@pytest.mark.parametrize("arm", list(paths.HEADLINE_VIEWS))
def test_predict_prints_sorted_probabilities_summing_to_one_for_png_and_odd_grey_jpeg(
    project, monkeypatch, capsys, arm
):
    rng = torch.Generator().manual_seed(1)
    colour = torch.randint(0, 256, (37, 53, 3), dtype=torch.uint8, generator=rng).numpy()
    Image.fromarray(colour).save(project / "photo.png")
    Image.fromarray(colour[:, :, 0]).save(project / "grey.jpg")
    status, out, _ = run_cli(predict, monkeypatch, capsys, "photo.png", "grey.jpg", "--model", arm, "--invert")
    assert status == 0
    lines = out.strip().splitlines()
    assert [parse_line(line)[0] for line in lines] == ["photo.png", "grey.jpg"]
    card = read_model_card(CARD_FOLDERS[arm])
    model, max_pixels = predict.load_model(card, arm, card["seeds"][0], CPU), load_params().images.max_pixels
    for line, file_name in zip(lines, ["photo.png", "grey.jpg"], strict=True):
        pairs = parse_line(line)[1]
        assert sorted(name for name, _ in pairs) == sorted(CLASSES)
        probabilities = [p for _, p in pairs]
        assert probabilities == sorted(probabilities, reverse=True)
        assert abs(sum(probabilities) - 1) <= 0.002  # three values printed to 3 decimals
        # the model's own probabilities on the inverted image, computed here without predict()
        size, channels = model.config.image_size, model.config.in_channels
        plain = predict.load_image(
            project / file_name, size, card["transform"], channels, invert=False, max_pixels=max_pixels
        )
        logits = model(normalise(255 - plain[None], card["mean"], card["std"]))
        expected = dict(zip(CLASSES, torch.softmax(logits, dim=-1)[0].tolist(), strict=True))
        assert all(abs(p - expected[name]) <= 0.0005 + 1e-6 for name, p in pairs)
    status, plain_out, _ = run_cli(predict, monkeypatch, capsys, "photo.png", "grey.jpg", "--model", arm)
    assert status == 0 and plain_out != out  # --invert changes what the model sees


def test_predict_on_a_saved_test_image_matches_the_model_on_the_stored_tensor(project):
    params = load_params()
    test_set = ImageSet.load(paths.prepared_split("scratch", "test"))
    Image.fromarray(test_set.images[3].permute(1, 2, 0).numpy()).save(project / "test3.png")
    card = read_model_card(paths.SCRATCH_MODELS)
    model = predict.load_model(card, "scratch", 1, CPU)
    image = predict.load_image(
        project / "test3.png", 32, "resize", 3, invert=False, max_pixels=params.images.max_pixels
    )
    assert torch.equal(image, test_set.images[3])
    probabilities = predict.predict(model, card, image[None], CPU)
    expected = torch.softmax(model(test_set.normalise(test_set.images[3:4])), dim=-1)
    torch.testing.assert_close(probabilities, expected)
    torch.testing.assert_close(probabilities.sum(), torch.tensor(1.0))


def test_predict_rejects_a_text_file_named_jpg_in_one_line(project, monkeypatch, capsys):
    (project / "x.jpg").write_text("not an image")
    status, out, err = run_cli(predict, monkeypatch, capsys, "x.jpg")
    assert status == 1 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert "x.jpg is not a readable image" in err and "Traceback" not in err


def test_predict_refuses_an_image_over_the_pixel_cap_from_its_header_in_one_line(project, monkeypatch, capsys):
    (project / "bomb.png").write_bytes(png_claiming(15000, 15000))  # 225 megapixels in a few hundred bytes
    status, out, err = run_cli(predict, monkeypatch, capsys, "bomb.png")
    assert status == 1 and out == ""
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "bomb.png is 15000x15000 = 225,000,000 pixels, over the cap of 89,478,485" in err
    assert "images.max_pixels" in err


def test_predict_with_a_missing_model_says_run_dvc_repro_in_one_line(project, monkeypatch, capsys):
    Image.new("L", (30, 30)).save(project / "a.png")
    status, _, err = run_cli(predict, monkeypatch, capsys, "a.png", "--seed", "7")
    assert status == 1
    assert len(err.strip().splitlines()) == 1
    assert "head_seed_7.pt is missing" in err and "dvc repro" in err and "dvc pull" in err


def test_the_transform_is_crop_only_for_the_paper_preset_s_pretrained_view():
    assert view_transform("offline", "pretrained") == view_transform("offline", "scratch") == "resize"
    assert view_transform("paper", "pretrained") == "crop" and view_transform("paper", "scratch") == "resize"


def test_predict_needs_only_the_models_and_their_card_not_the_prepared_data(project, monkeypatch, capsys):
    """A teammate's `dvc pull` of models/ is enough: the card holds classes, mean/std and transform."""
    import json
    import shutil

    Image.new("L", (30, 30), 200).save(project / "a.png")
    _, before, _ = run_cli(predict, monkeypatch, capsys, "a.png", "--model", "scratch")
    shutil.rmtree(project / "data")
    status, after, _ = run_cli(predict, monkeypatch, capsys, "a.png", "--model", "scratch")
    assert status == 0 and after == before
    card = json.loads((paths.SCRATCH_MODELS / "model.json").read_text())
    assert card["classes"] == CLASSES and card["model"]["image_size"] == 32 and card["transform"] == "resize"
    (paths.SCRATCH_MODELS / "model.json").unlink()
    status, _, err = run_cli(predict, monkeypatch, capsys, "a.png", "--model", "scratch")
    assert status == 1 and "model.json is missing" in err and "dvc repro" in err


def test_predict_runs_its_images_in_batches_of_bounded_size(project, monkeypatch, capsys):
    """Memory is bounded by the batch, not the number of images: each batch is decoded, run and printed."""
    for i in range(5):
        Image.new("L", (30, 30), 40 * i).save(project / f"{i}.png")
    sizes, real = [], predict.predict
    monkeypatch.setattr(predict, "BATCH_SIZE", 2)
    monkeypatch.setattr(predict, "predict", lambda m, c, images, r: sizes.append(len(images)) or real(m, c, images, r))
    status, out, _ = run_cli(predict, monkeypatch, capsys, *(f"{i}.png" for i in range(5)), "--model", "scratch")
    assert status == 0 and sizes == [2, 2, 1]
    assert [parse_line(line)[0] for line in out.strip().splitlines()] == [f"{i}.png" for i in range(5)]


def test_the_default_predict_batch_is_64():
    assert predict.BATCH_SIZE == 64


def test_predict_names_a_missing_image_before_printing_anything(project, monkeypatch, capsys):
    Image.new("L", (30, 30)).save(project / "a.png")
    status, out, err = run_cli(predict, monkeypatch, capsys, "a.png", "nope.png")
    assert status == 1 and out == ""
    assert err.strip() == "error in stage predict: nope.png: no such file; give paths to image files"


def test_predict_refuses_a_tiff_named_jpg_in_one_line_naming_the_allowed_formats(project, monkeypatch, capsys):
    Image.new("RGB", (30, 30)).save(project / "scan.jpg", format="TIFF")
    status, out, err = run_cli(predict, monkeypatch, capsys, "scan.jpg")
    assert status == 1 and out == "" and len(err.strip().splitlines()) == 1
    assert "scan.jpg is not a readable image: by its content it is none of JPEG, PNG, WebP, BMP, GIF" in err
