"""Stage download: the preset's raw dataset into data/raw/, verified, never half-written."""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

from pipeline import paths
from pipeline.config import PaperConfig, load_params
from pipeline.data import list_image_folder
from pipeline.errors import UserError, stage_main
from pipeline.fashion_mnist import obtain_fashion_mnist
from pipeline.fetch import download, safe_extract_zip
from pipeline.files import atomic_dir
from pipeline.logs import stage_log as log


def find_split_root(folder: Path) -> Path:
    """The folder holding ``train/`` and ``test/``: ``folder`` itself or its only subfolder."""
    if (folder / "train").is_dir():
        return folder
    children = [p for p in folder.iterdir() if p.is_dir() and not p.name.startswith((".", "__MACOSX"))]
    if len(children) == 1 and (children[0] / "train").is_dir():
        return children[0]
    raise UserError(f"{folder} has no train/ and test/ folders; the dataset must be in ImageFolder layout")


def _copy_file(source: str, target: str) -> None:
    """copytree's copy, raising a full disk at once: copytree gathers each file's OSError into one
    ``shutil.Error`` of strings, which hides the errno (and would go on copying onto a full disk)."""
    try:
        shutil.copy2(source, target)
    except OSError as error:
        if error.errno in (errno.ENOSPC, errno.EDQUOT):
            raise UserError(
                f"the disk is full ({error.strerror}) while copying {source}; nothing was kept (the copy is made in "
                "a temporary folder, now removed, and the previous data/raw is intact): free disk space and rerun"
            ) from None
        raise


def copy_tree_atomically(source: Path, target: Path) -> None:
    """Copies ``source`` to ``target`` through a temporary folder, so ``target`` is whole or absent.

    Raises:
        UserError: the disk filled up, or files could not be read (named, with the first reason).
    """
    with atomic_dir(target) as tmp:
        try:
            shutil.copytree(source, tmp, dirs_exist_ok=True, copy_function=_copy_file)
        except shutil.Error as error:
            failures = error.args[0]
            first = failures[0] if isinstance(failures, list) and failures else (source, "", str(error))
            raise UserError(
                f"{len(failures) if isinstance(failures, list) else 1} file(s) of {source} could not be copied "
                f"(first: {first[0]}: {first[-1]}); nothing was kept. Fix their permissions or remove them, and rerun"
            ) from None


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
