"""pipeline.arms.cnn: the small ResNet of data_hunger.cnn_widths, trained by the shared trainer (fit_seed) with
its own section of params.yaml."""

from __future__ import annotations

from helpers import CPU, tiny_params

from pipeline.arms import cnn as cnn_arm
from pipeline.arms import protocol
from pipeline.arms.protocol import Curve
from pipeline.models.resnet import small_resnet
from pipeline.train.loop import count_parameters


def shapes(model) -> list[tuple[str, tuple[int, ...]]]:
    return [(name, tuple(t.shape)) for name, t in model.state_dict().items()]


def test_one_seed_trains_the_small_resnet_of_the_configured_widths_through_fit_seed(curve_project, monkeypatch):
    params = tiny_params(cnn_widths=[4, 8])
    curve_ = Curve("paper", "tiny", "tiny", "supervised", params.data_hunger, 8, CPU)
    data_ = cnn_arm.point_data(curve_, 2)
    calls = []

    def spy(curve, data, seed, lr, arm, build_model):
        def build(train_set):
            calls.append((seed, lr, arm, model := build_model(train_set)))
            return model

        return protocol.fit_seed(curve, data, seed, lr, arm, build)

    monkeypatch.setattr(cnn_arm, "fit_seed", spy)
    result = cnn_arm.run_seed(curve_, data_, 1, 0.003)
    ((seed, lr, arm, model),) = calls
    assert (seed, lr, arm) == (1, 0.003, "cnn")  # data_hunger.cnn's recipe, at this lr
    assert shapes(model) == shapes(small_resnet(3, 3, (4, 8)))  # colour images, three classes, widths 4 and 8
    assert shapes(model) != shapes(small_resnet(3, 3, (32, 64, 128, 256)))
    assert result["trained_parameters"] == count_parameters(small_resnet(3, 3, (4, 8)))
    assert result["lr"] == 0.003 and result["budget"] == 6 and result["curve"][0]["step"] == 0
    assert 0 <= result["score"]()["test_acc"] <= 1
