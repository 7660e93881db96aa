"""The paper preset: seed 000's ImageFolder (``train/<class>/*``, ``test/<class>/*``) from ``paper.folder`` or the
pinned zip, decoded once per view (:func:`~pipeline.data.images.prepare_image_folder`)."""

from __future__ import annotations

import shutil
from pathlib import Path

from pipeline.core import paths
from pipeline.core.config import PaperConfig
from pipeline.core.errors import UserError
from pipeline.core.files import copy_tree_atomically
from pipeline.data.fetch import download, safe_extract_zip
from pipeline.data.images import IMAGENET_MEAN, IMAGENET_STD, find_split_root, list_image_folder, prepare_image_folder
from pipeline.data.presets import Preset


def obtain_image_folder(config: PaperConfig, target: Path, downloads: Path) -> Path:
    """The paper preset's images in ``target/{train,test}/<class>/``, from ``paper.folder`` or, while that is the
    default folder and holds no subfolder, the pinned zip."""
    source = Path(config.folder).expanduser()
    if not source.is_dir():
        raise UserError(
            f"paper.folder {source} is not a folder; fix the path in params.yaml, or set it back to "
            f"{paths.PAPER_FOLDER} (while that holds no images, the pinned zip paper.url is used)"
        )
    default = source.resolve() == paths.PAPER_FOLDER.resolve()
    use_zip = default and not any(child.is_dir() for child in source.iterdir())  # the default, still empty
    if not use_zip:
        list_image_folder(find_split_root(source))  # reject a bad layout before copying anything
        copy_tree_atomically(find_split_root(source), target)
        return target
    archive = download(config.url, downloads / Path(config.url).name, config.sha256,
                       max_bytes=config.max_download_mb << 20, deadline_s=config.download_deadline_s)  # fmt: skip
    extracted = safe_extract_zip(
        archive, target.with_name(target.name + ".extracted"), max_bytes=config.max_extract_mb << 20
    )
    try:
        root = find_split_root(extracted)
        list_image_folder(root)
        copy_tree_atomically(root, target)
    finally:
        shutil.rmtree(extracted, ignore_errors=True)
    return target


def paper_views(scratch: tuple[int, int], pretrained: tuple[int, int]) -> dict[str, tuple]:
    """The paper preset's two input transforms, from each arm's model (image size, channels): ``scratch``
    squashed to the model size (seed 000); ``pretrained`` the weights' resize and centre crop, ImageNet
    mean and std (torchvision's transform for its weights)."""
    return {
        "scratch": (*scratch, "resize", (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)),
        "pretrained": (*pretrained, "crop", IMAGENET_MEAN, IMAGENET_STD),
    }


def obtain(config: PaperConfig, raw: Path, downloads: Path) -> Path:
    return obtain_image_folder(config, raw / "images", downloads)


def prepare(config: PaperConfig, raw: Path, out: Path, view_sizes: dict[str, tuple[int, int]], val_per_class: int,
            max_pixels: int) -> dict:  # fmt: skip
    views = paper_views(view_sizes["scratch"], view_sizes["pretrained"])
    return prepare_image_folder(raw / "images", out, views, max_pixels, val_per_class)


PRESET = Preset(
    name="paper",
    obtain=obtain,
    prepare=prepare,
    view_models=lambda config: {"scratch": config.model, "pretrained": config.backbone_model},
    training_file=lambda view: paths.prepared_split(view, "train"),  # the train folder less its validation images
    has_pool=False,  # the backbone is ImageNet's: nothing is held out here to pretrain on
    sizes_are_counts=False,
    pretrained_view_crops=True,
)
