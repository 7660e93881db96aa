"""Datasets as uint8 tensors: decoded and resized once by the prepare stage, normalised per batch."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from pipeline.core import paths
from pipeline.core.errors import UserError
from pipeline.core.files import load_tensors, save_tensors, sha256_bytes
from pipeline.data import presets

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp")
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
FASHION_MNIST_MEAN, FASHION_MNIST_STD = (0.2860,), (0.3530,)
# The pretrained view follows torchvision's ImageClassification transform: resize to 256, crop 224.
RESIZE_RATIO = 256 / 224
VALIDATION_SEED = 1000  # which training images are held out for validation; fixed, apart from the run seeds


@dataclass
class ImageSet:
    """Images (N, C, H, W) uint8 with labels (N,) int64, class names and normalisation."""

    images: torch.Tensor
    labels: torch.Tensor
    classes: list[str]
    mean: tuple[float, ...]
    std: tuple[float, ...]

    def __post_init__(self) -> None:
        if self.images.dtype != torch.uint8 or self.images.ndim != 4:
            raise ValueError(f"images must be uint8 (N, C, H, W), got {self.images.dtype} {tuple(self.images.shape)}")
        if len(self.images) != len(self.labels):
            raise ValueError(f"{len(self.images)} images but {len(self.labels)} labels")

    def __len__(self) -> int:
        return len(self.labels)

    def subset(self, index: torch.Tensor) -> ImageSet:
        return ImageSet(self.images[index], self.labels[index], list(self.classes), self.mean, self.std)

    def normalise(self, images: torch.Tensor) -> torch.Tensor:
        return normalise(images, self.mean, self.std)

    def save(self, path: str | Path) -> None:
        save_tensors(
            path,
            {
                "images": self.images,
                "labels": self.labels,
                "classes": list(self.classes),
                "mean": list(self.mean),
                "std": list(self.std),
            },
        )

    @classmethod
    def load(cls, path: str | Path) -> ImageSet:
        data = load_tensors(path)
        return cls(data["images"], data["labels"], list(data["classes"]), tuple(data["mean"]), tuple(data["std"]))


def normalise(images: torch.Tensor, mean, std) -> torch.Tensor:
    """uint8 (B, C, H, W) -> float32, scaled to [0, 1], then standardised per channel."""
    mean = torch.tensor(mean, device=images.device).view(1, -1, 1, 1)
    std = torch.tensor(std, device=images.device).view(1, -1, 1, 1)
    return (images.float() / 255 - mean) / std


def augment(images: torch.Tensor, generator: torch.Generator, pad: int = 2) -> torch.Tensor:
    """Random crop after zero padding, and random horizontal flip, on a uint8 or float batch."""
    batch, _, height, width = images.shape
    padded = F.pad(images, (pad, pad, pad, pad))
    dy = torch.randint(0, 2 * pad + 1, (batch,), generator=generator)
    dx = torch.randint(0, 2 * pad + 1, (batch,), generator=generator)
    rows = (dy.view(-1, 1) + torch.arange(height)).view(batch, 1, height, 1)
    cols = (dx.view(-1, 1) + torch.arange(width)).view(batch, 1, 1, width)
    flip = torch.rand(batch, generator=generator) < 0.5
    cols = torch.where(flip.view(-1, 1, 1, 1), cols.flip(-1), cols)
    batch_index = torch.arange(batch).view(-1, 1, 1, 1)
    channel_index = torch.arange(images.shape[1]).view(1, -1, 1, 1)
    # (B, C, H+2p, W+2p) gathered at per-image offsets -> (B, C, H, W)
    return padded[batch_index, channel_index, rows, cols]


def batch_preparer(image_set: ImageSet, augment_train: bool):
    """A batch function for the engine: uint8 -> normalised float, augmented when training and asked."""

    def prepare(images: torch.Tensor, training: bool, generator: torch.Generator) -> torch.Tensor:
        if training and augment_train:
            images = augment(images, generator)
        return image_set.normalise(images)

    return prepare


def subset(images: np.ndarray, labels: np.ndarray, indices: np.ndarray, class_ids: list[int]) -> tuple:
    """Images (N, 1, H, W) uint8 and labels remapped to 0..len(class_ids)-1, for ``indices``."""
    remap = {class_id: i for i, class_id in enumerate(class_ids)}
    picked = torch.from_numpy(images[indices]).unsqueeze(1).contiguous()  # (N, H, W) -> (N, 1, H, W)
    new_labels = torch.tensor([remap[int(label)] for label in labels[indices]], dtype=torch.int64)
    return picked, new_labels


def manifest_rows(split: str, images: torch.Tensor, labels: torch.Tensor, classes: list[str], sources: list[str]):
    """One manifest row per image: split, source (file or index), class, sha256 of the stored pixels."""
    for image, label, source in zip(images, labels, sources, strict=True):
        yield split, source, classes[int(label)], sha256_bytes(image.numpy().tobytes())


def find_split_root(folder: Path) -> Path:
    """The folder holding ``train/`` and ``test/``: ``folder`` itself or its only subfolder."""
    if (folder / "train").is_dir():
        return folder
    children = [p for p in folder.iterdir() if p.is_dir() and not p.name.startswith((".", "__MACOSX"))]
    if len(children) == 1 and (children[0] / "train").is_dir():
        return children[0]
    raise UserError(f"{folder} has no train/ and test/ folders; the dataset must be in ImageFolder layout")


def list_image_folder(root: Path) -> tuple[list[str], dict[str, list[tuple[Path, int]]]]:
    """Classes and (file, label) pairs of an ImageFolder tree ``root/{train,test}/<class>/<image>``, as
    torchvision's ``ImageFolder`` finds them (``find_classes``, ``make_dataset`` with our image suffixes).

    Raises:
        UserError: a split is missing, a class folder is empty, or the two splits' classes differ.
    """
    # Imported here: torchvision.datasets takes a second to import, which stages without image folders skip.
    from torchvision.datasets.folder import find_classes, make_dataset

    splits = {}
    for split in ("train", "test"):
        folder = root / split
        if not folder.is_dir():
            raise UserError(
                f"{folder} is missing; the dataset must have train/<class>/*.jpg and test/<class>/*.jpg folders"
            )
        try:
            classes = [name for name in find_classes(folder)[0] if not name.startswith(".")]
        except FileNotFoundError:
            classes = []
        if not classes:
            raise UserError(f"{folder} has no class folders; put each class's images in {folder}/<class name>/")
        splits[split] = classes
    if splits["train"] != splits["test"]:
        raise UserError(
            f"{root}: train and test have different class folders: train {splits['train']}, test {splits['test']}; "
            "make both splits hold the same classes"
        )
    classes = splits["train"]
    files: dict[str, list[tuple[Path, int]]] = {}
    for split in ("train", "test"):
        class_to_index = {name: label for label, name in enumerate(classes)}
        # image files only (by suffix, any case): a Thumbs.db or README.txt beside them is skipped
        found = make_dataset(str(root / split), class_to_index, extensions=IMAGE_SUFFIXES, allow_empty=True)
        for name in classes:
            if not any(label == class_to_index[name] for _, label in found):
                suffixes = ", ".join(IMAGE_SUFFIXES)
                raise UserError(f"{root / split / name} holds no image ({suffixes}); every class needs at least one")
        files[split] = [(Path(path), label) for path, label in found]
    return classes, files


class ImageTooLargeError(UserError):
    """An image's header claims more pixels than ``images.max_pixels``."""


class ImageShapeError(UserError):
    """An image's header gives a side over :data:`MAX_ASPECT_RATIO` times the other."""


# Formats decoded, identified by content whatever the file's name says: an EPS named .jpg would otherwise go to
# Ghostscript, a TIFF named .jpg be accepted. Every other format PIL knows is refused.
IMAGE_FORMATS = ("JPEG", "PNG", "WEBP", "BMP", "GIF")
# Longer side over shorter side, refused from the header: an 8 x 500,000 PNG passes the pixel cap but would
# resize to 256 x 16,000,000 (12 GB) in crop mode; at 20:1 the resized image is at most 20 times a square.
MAX_ASPECT_RATIO = 20
BACKGROUND = (255, 255, 255)  # transparent pixels are composited on white, as a browser shows them on a page
# Greyscale modes with more than 8 bits: scaled into 0..255 by their full range, never clipped.
_WIDE_MODES = ("I;16", "I;16L", "I;16B", "I;16N", "I", "F")


def _to_8_bit(image):
    """A 16-bit, 32-bit integer or float greyscale image as mode L: 16-bit values (I;16, and I holding
    0..65535 as a 16-bit PNG decodes) divided by 257, so 65535 is 255; float in [0, 1] times 255; any other
    range stretched from its minimum to its maximum. Clipping to 255 would turn most 16-bit images white."""
    from PIL import Image

    values = np.asarray(image, dtype=np.float64)
    low, high = (float(values.min()), float(values.max())) if values.size else (0.0, 0.0)
    if image.mode.startswith("I;16") or (image.mode == "I" and low >= 0 and high <= 65535):
        scaled = values / 257
    elif image.mode == "F" and low >= 0 and high <= 1:
        scaled = values * 255
    else:
        scaled = (values - low) * (255 / (high - low)) if high > low else np.zeros_like(values)
    return Image.fromarray(np.round(scaled).astype(np.uint8), mode="L")


def _to_mode(image, target: str):
    """``image`` in ``target`` (RGB or L): alpha composited on :data:`BACKGROUND` (RGBA, LA, PA, a palette
    with a transparent entry), wide greyscale scaled (:func:`_to_8_bit`), palette, CMYK, YCbCr and bilevel
    converted by PIL."""
    from PIL import Image

    if image.mode in _WIDE_MODES:
        image = _to_8_bit(image)
    has_alpha = image.mode in ("RGBA", "RGBa", "LA", "La", "PA") or (image.mode == "P" and "transparency" in image.info)
    if has_alpha:
        rgba = image.convert("RGBA")
        image = Image.alpha_composite(Image.new("RGBA", rgba.size, (*BACKGROUND, 255)), rgba).convert("RGB")
    return image if image.mode == target else image.convert(target)


def _check_header(path: Path, width: int, height: int, max_pixels: int) -> None:
    """Refuses an image from its header's size: over ``max_pixels``, or too far from square to resize."""
    if width * height > max_pixels:
        raise ImageTooLargeError(
            f"{path} is {width}x{height} = {width * height:,} pixels, over the cap of {max_pixels:,} "
            "(images.max_pixels in params.yaml); remove the file or shrink it, or raise the cap if you "
            "trust it"
        )
    if max(width, height) > MAX_ASPECT_RATIO * min(width, height):
        raise ImageShapeError(
            f"{path} is {width}x{height}, one side over {MAX_ASPECT_RATIO} times the other (the most "
            f"resizing to a square accepts, pipeline.data.images.MAX_ASPECT_RATIO); crop it to a less extreme "
            "shape or remove it"
        )


def decode_image(path: Path, size: int, mode: str, channels: int, max_pixels: int) -> torch.Tensor:
    """Decodes one image file to uint8 (C, size, size).

    The file must be a JPEG, PNG, WebP, BMP or GIF by its content (:data:`IMAGE_FORMATS`). Its EXIF
    orientation is applied; transparent pixels are composited on white (:data:`BACKGROUND`); 16-bit and
    float greyscale is scaled to 0..255, not clipped; palette, CMYK and greyscale-with-alpha images are
    converted; an animated image gives its first frame, with a one-line note on stderr.

    Args:
        path: the image file.
        size: output side length.
        mode: "resize" squashes to size x size (seed 000's from-scratch transform); "crop" resizes the
            short side to size * 256/224 and takes the centre size x size (torchvision's weights' transform).
        channels: 3 for RGB, 1 for greyscale.
        max_pixels: images with more pixels are refused from their header, before decoding
            (``images.max_pixels``; a few hundred bytes of PNG can claim gigabytes of pixels).

    Raises:
        UserError: the file is not an image of an allowed format, is truncated, is over the pixel cap
            (:class:`ImageTooLargeError`) or has one side over :data:`MAX_ASPECT_RATIO` times the other
            (:class:`ImageShapeError`).
    """
    from PIL import Image, ImageOps, UnidentifiedImageError
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms import functional as TF

    limit = Image.MAX_IMAGE_PIXELS
    try:
        Image.MAX_IMAGE_PIXELS = None  # our own cap below replaces PIL's, so the message is ours
        with Image.open(path, formats=IMAGE_FORMATS) as image:  # reads the header only
            _check_header(path, *image.size, max_pixels)
            frames = getattr(image, "n_frames", 1)
            if frames > 1:
                print(f"note: {path} is animated ({frames} frames); using its first frame", file=sys.stderr)
            image.load()
            image = _to_mode(ImageOps.exif_transpose(image), "RGB" if channels == 3 else "L")
    except UnidentifiedImageError:
        raise UserError(
            f"{path} is not a readable image: by its content it is none of JPEG, PNG, WebP, BMP, GIF (the format "
            "is read from the bytes, not the name, so an EPS or TIFF renamed .jpg is refused); convert it to one "
            "of these, or remove or replace it, and rerun"
        ) from None
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as error:
        raise UserError(f"{path} is not a readable image ({error}); remove or replace it and rerun") from None
    finally:
        Image.MAX_IMAGE_PIXELS = limit
    if mode == "resize":
        image = TF.resize(image, [size, size], interpolation=InterpolationMode.BILINEAR)
    else:
        image = TF.resize(image, round(size * RESIZE_RATIO), interpolation=InterpolationMode.BILINEAR)
        image = TF.center_crop(image, [size, size])
    return TF.pil_to_tensor(image)


def load_split(path: Path) -> ImageSet:
    """Loads a prepared split, with a hint when the prepare stage has not run."""
    if not Path(path).is_file():
        raise UserError(f"{path} is missing; run `dvc repro` (the prepare stage makes it)")
    return ImageSet.load(path)


def nested_indices(labels: torch.Tensor, per_class: int | None, seed: int) -> torch.Tensor:
    """Sorted indices of the first ``per_class`` images of each class in a per-class order drawn from ``seed``.

    The order depends only on ``labels`` and ``seed``, so within a seed a smaller size is a subset of a larger
    one; each seed draws its own subsets. A class with fewer images (or ``per_class`` None) gives all it has.
    """
    rng = np.random.default_rng(seed)
    labels_np = labels.numpy()
    chosen = []
    for class_id in range(int(labels_np.max()) + 1):
        order = rng.permutation(np.flatnonzero(labels_np == class_id))
        chosen.append(order[:per_class])
    return torch.from_numpy(np.sort(np.concatenate(chosen)))


def split_validation(labels: torch.Tensor, per_class: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(training, validation) sorted indices: ``per_class`` images of each class (drawn with
    :data:`VALIDATION_SEED`) are validation, the rest training.

    Raises:
        UserError: a class has no more than ``per_class`` images, so nothing would be left to train on.
    """
    counts = torch.bincount(labels)
    if int(counts.min()) <= per_class:
        raise UserError(
            f"validation takes {per_class} images per class but a class has only {int(counts.min())} training "
            "images; lower validation.*_per_class in params.yaml"
        )
    val = nested_indices(labels, per_class, VALIDATION_SEED)
    keep = torch.ones(len(labels), dtype=torch.bool)
    keep[val] = False
    return torch.nonzero(keep).flatten(), val


SINGLE_VIEW = ("pool_train", "pool_test", "train_all")  # saved once as data/prepared/<split>.pt, not per arm


def split_file(out: Path, view: str, split: str) -> Path:
    """Where ``paths.prepared_split(view, split)`` will be, inside the folder ``out`` being written."""
    return out / paths.prepared_split(view, split).relative_to(paths.PREPARED)


def fit_to_model(images: torch.Tensor, size: int, channels: int) -> torch.Tensor:
    """(N, 1, 28, 28) uint8 -> (N, channels, size, size) uint8, for models not built for 28x28 grey."""
    if images.shape[-1] != size:
        images = F.interpolate(images.float(), size=(size, size), mode="bilinear", align_corners=False)
        images = images.round().clamp(0, 255).to(torch.uint8)
    return images.expand(-1, channels, -1, -1).contiguous()


def view_transform(preset: str, view: str) -> str:
    """How a view decodes an image file (:func:`decode_image`'s mode): a preset's pretrained view resizes and
    centre-crops where its weights expect it (the paper preset's torchvision weights); every other view squashes
    to the model size."""
    return "crop" if presets.get(preset).pretrained_view_crops and view == "pretrained" else "resize"


def decode_into(out: torch.Tensor, paths: list[Path], size: int, mode: str, max_pixels: int) -> torch.Tensor:
    """Decodes ``paths`` one at a time into the preallocated uint8 ``out`` (N, C, size, size): memory holds the
    set once and a single image's decode, not a list of decoded images and their stacked copy."""
    for i, path in enumerate(paths):
        out[i] = decode_image(path, size, mode, out.shape[1], max_pixels)
    return out


def prepare_image_folder(root: Path, out: Path, views: dict[str, tuple], max_pixels: int, val_per_class: int) -> dict:
    """Decodes an ImageFolder tree once per view (the paper preset's: ``image_folder.paper_views``) into ``out``:
    the train folder's images split into ``train`` and ``val`` (``val_per_class`` per class, the same images in
    every view), and ``test``. Returns the classes, counts per split and manifest rows.

    The split is drawn from the labels before anything is decoded, and each split's images are decoded
    straight into its own tensor and saved before the next is decoded: at most one split of one view is in
    memory (``images.max_pixels`` and :data:`MAX_ASPECT_RATIO` bound each image's decode)."""
    classes, files = list_image_folder(root)
    manifest, counts = [], {}
    splits = {}  # split -> (file pairs) in the order the split's tensor holds them
    for folder, pairs in files.items():
        labels = torch.tensor([label for _, label in pairs], dtype=torch.int64)
        if folder == "test":
            parts = {"test": torch.arange(len(labels))}
        else:
            parts = dict(zip(("train", "val"), split_validation(labels, val_per_class), strict=True))
        for split, index in parts.items():
            splits[split] = [pairs[i] for i in index.tolist()]
    for view, (image_size, channels, mode, mean, std) in views.items():
        for split, pairs in splits.items():
            images = torch.empty(len(pairs), channels, image_size, image_size, dtype=torch.uint8)
            decode_into(images, [path for path, _ in pairs], image_size, mode, max_pixels)
            labels = torch.tensor([label for _, label in pairs], dtype=torch.int64)
            ImageSet(images, labels, classes, tuple(mean[:channels]), tuple(std[:channels])).save(
                split_file(out, view, split)
            )
            if view == "scratch":
                sources = [str(path.relative_to(root)) for path, _ in pairs]
                manifest += manifest_rows(split, images, labels, classes, sources)
                counts[split] = len(pairs)
            del images  # before the next split's tensor is allocated
    return {"classes": classes, "pool_classes": [], "counts": counts, "manifest": manifest}
