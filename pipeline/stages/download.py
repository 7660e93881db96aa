"""Stage download: the preset's raw dataset into data/raw/, verified, never half-written."""

from __future__ import annotations

import shutil
from pathlib import Path

from pipeline.core import paths
from pipeline.core.config import PaperConfig
from pipeline.core.entry import stage_main
from pipeline.core.errors import UserError
from pipeline.core.files import copy_tree_atomically
from pipeline.core.logs import stage_log as log
from pipeline.core.params_yaml import load_params
from pipeline.data.fetch import download, safe_extract_zip
from pipeline.data.images import find_split_root, list_image_folder
from pipeline.data.presets.fashion_mnist import obtain_fashion_mnist


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


@stage_main
def main() -> None:
    params = load_params()
    if params.preset == "offline":
        where = obtain_fashion_mnist(
            paths.RAW / "fashion-mnist", debian_dir=Path(params.offline.debian_dir), mirror=params.offline.mirror
        )
    else:
        where = obtain_image_folder(params.paper, paths.RAW / "images", paths.DOWNLOADS)
    log.info(f"download: {params.preset} dataset ready in {where}")


if __name__ == "__main__":
    main()
