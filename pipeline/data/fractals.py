"""Formula-driven images without a download: categories of iterated function systems, FractalDB-style.

Kataoka et al. (ACCV 2020, "Pre-training without Natural Images") make a labelled image set from equations: a
*category* is an iterated function system (IFS), a set of affine maps w_k(x) = A_k x + b_k of the plane chosen at
random, each with probability p_k proportional to |det A_k|; its image is the system's attractor, drawn by the
chaos game (start anywhere, apply a map drawn by p at every step, plot the points after a burn-in). A category is
kept only if its attractor fills a share of the image between two bounds (a *filling rate*: not a dot, not a
blur). Its *instances* perturb the system's parameters a little and flip the image, so that one category is one
shape seen in variants. We draw IFS rather than radial contours (Kataoka et al., CVPR 2022, RCDB) because the
chaos game renders a whole batch of systems at once in a handful of array operations (no polygon rasteriser), and
an IFS's detail at every scale suits a 28x28 image better than contours a few pixels wide.

Everything is deterministic from ``FractalSpec.seed``: the categories from the seed alone, category c's instances
from (seed, c), whatever batch it is rendered in. Images are rendered at ``render`` pixels a side and averaged down
to ``size``, as uint8 greyscale (1M images of 28x28 are 784 MB).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class FractalSpec:
    """What :func:`categories` and :func:`render_category` draw."""

    seed: int
    categories: int
    per_category: int
    size: int = 28  # the images' side (Fashion-MNIST's)
    render: int = 56  # the side the chaos game plots at, averaged down to ``size`` (antialiasing)
    points: int = 2000  # plotted points per image, after a burn-in of ``burn_in``
    burn_in: int = 20
    maps: tuple[int, int] = (2, 4)  # affine maps per system, both ends included
    fill: tuple[float, float] = (0.15, 0.6)  # the filling rate a category's image must have at ``size``
    jitter: float = 0.1  # an instance multiplies every parameter by 1 + U(-jitter, jitter)


def contractive(params: np.ndarray) -> np.ndarray:
    """Whether each map's linear part shrinks every vector (spectral norm < 1), so that the chaos game has an
    attractor: ``params`` (..., 6) as (a, b, c, d, e, f) with A = [[a, b], [c, d]], b = (e, f); shape (...)."""
    linear = params[..., :4].reshape(*params.shape[:-1], 2, 2)
    return np.linalg.norm(linear, ord=2, axis=(-2, -1)) < 1.0


def map_probabilities(params: np.ndarray, active: np.ndarray) -> np.ndarray:
    """p_k proportional to |det A_k| (FractalDB), a floor keeping a degenerate map in play, 0 for padding maps;
    ``params`` (B, M, 6), ``active`` (B, M) -> (B, M), rows summing to 1."""
    det = np.abs(params[..., 0] * params[..., 3] - params[..., 1] * params[..., 2])
    weight = np.where(active, np.maximum(det, 0.02), 0.0)
    return weight / weight.sum(axis=1, keepdims=True)


def chaos_game(params: np.ndarray, active: np.ndarray, spec: FractalSpec, draws: np.ndarray) -> np.ndarray:
    """The attractors of B systems, ``params`` (B, M, 6) with ``active`` (B, M) maps, drawn as (B, size, size)
    uint8 images: ``spec.points`` chaos-game points each (the map of each step picked by ``draws``, uniform in
    [0, 1), shape (burn_in + points, B)), scaled into the image by their own bounding box, counted per pixel at
    ``spec.render``, log-scaled to 0-255 and averaged down to ``spec.size``. Memory: (points, B, 2) floats."""
    batch = len(params)
    cumulative = np.cumsum(map_probabilities(params, active), axis=1)
    chosen = (draws[..., None] > cumulative[None]).sum(axis=2).clip(max=params.shape[1] - 1)
    steps = len(draws)
    rows = np.arange(batch)
    point = np.zeros((batch, 2))
    plotted = np.empty((spec.points, batch, 2), dtype=np.float32)
    for step in range(steps):
        a, b, c, d, e, f = params[rows, chosen[step]].T  # each (B,)
        point = np.stack([a * point[:, 0] + b * point[:, 1] + e, c * point[:, 0] + d * point[:, 1] + f], axis=1)
        if step >= spec.burn_in:
            plotted[step - spec.burn_in] = point
    low, high = plotted.min(axis=0), plotted.max(axis=0)  # (B, 2): each image's own bounding box
    scale = (spec.render - 1) / np.maximum(high - low, 1e-6).max(axis=1, keepdims=True)  # keeps the aspect
    offset = (spec.render - 1 - (high - low) * scale) / 2  # centred
    pixels = np.rint((plotted - low) * scale + offset).astype(np.int64).clip(0, spec.render - 1)  # (P, B, 2)
    flat = (rows[None, :] * spec.render + pixels[..., 1]) * spec.render + pixels[..., 0]
    counts = np.bincount(flat.ravel(), minlength=batch * spec.render**2).reshape(batch, spec.render, spec.render)
    level = np.log1p(counts) / np.log1p(counts.max(axis=(1, 2), keepdims=True))
    factor = spec.render // spec.size
    pooled = level.reshape(batch, spec.size, factor, spec.size, factor).mean(axis=(2, 4))
    return np.rint(255 * pooled).astype(np.uint8)


def sample_systems(count: int, spec: FractalSpec, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``count`` random contractive systems, parameters uniform in [-1, 1], ``spec.maps`` maps each (padding maps
    beyond a system's own count are inactive): (count, M, 6) parameters and (count, M) ``active``."""
    most = spec.maps[1]
    params = np.empty((0, most, 6))
    active = np.empty((0, most), dtype=bool)
    while len(params) < count:
        candidates = rng.uniform(-1, 1, size=(4 * count, most, 6))
        n_maps = rng.integers(spec.maps[0], spec.maps[1] + 1, size=4 * count)
        used = np.arange(most)[None, :] < n_maps[:, None]
        keep = (contractive(candidates) | ~used).all(axis=1)
        params, active = np.concatenate([params, candidates[keep]]), np.concatenate([active, used[keep]])
    return params[:count], active[:count]


def filling_rate(images: np.ndarray) -> np.ndarray:
    """The share of each image's pixels that the attractor reaches (non-zero), (B, H, W) -> (B,)."""
    return (images > 0).mean(axis=(1, 2))


def categories(spec: FractalSpec) -> tuple[np.ndarray, np.ndarray]:
    """``spec.categories`` systems whose attractor's filling rate lies within ``spec.fill``, drawn from
    ``spec.seed`` alone: (C, M, 6) parameters and (C, M) ``active``."""
    rng = np.random.default_rng([spec.seed, 0])
    params, active = np.empty((0, spec.maps[1], 6)), np.empty((0, spec.maps[1]), dtype=bool)
    while len(params) < spec.categories:
        candidates, used = sample_systems(max(64, spec.categories), spec, rng)
        fill = filling_rate(chaos_game(candidates, used, spec, rng.random((spec.burn_in + spec.points, len(used)))))
        keep = (fill >= spec.fill[0]) & (fill <= spec.fill[1])
        params, active = np.concatenate([params, candidates[keep]]), np.concatenate([active, used[keep]])
    return params[: spec.categories], active[: spec.categories]


def render_categories(spec: FractalSpec, params: np.ndarray, active: np.ndarray, chosen: range) -> np.ndarray:
    """The ``spec.per_category`` instances of each category in ``chosen``, in one chaos game; category c's from
    (seed, c) alone, so that the bytes do not depend on which categories share a batch. An instance multiplies
    every parameter of its system (``params[c]`` (M, 6), ``active[c]`` (M,)) by 1 + U(-jitter, jitter) (a map
    the jitter makes non-contractive is shrunk back inside), then flips at random horizontally and vertically.
    Returns (len(chosen) x per_category, 1, size, size) uint8, category by category."""
    n, steps = spec.per_category, spec.burn_in + spec.points
    varied, draws, flips = [], [], []
    for category in chosen:
        rng = np.random.default_rng([spec.seed, 1, category])
        varied.append(params[category][None] * (1 + rng.uniform(-spec.jitter, spec.jitter, (n, *params.shape[1:]))))
        draws.append(rng.random((steps, n)))
        flips.append(rng.integers(0, 2, size=(n, 2)).astype(bool))
    varied, flips = np.concatenate(varied), np.concatenate(flips)
    norm = np.linalg.norm(varied[..., :4].reshape(*varied.shape[:2], 2, 2), ord=2, axis=(-2, -1))
    varied[..., :4] *= np.where(norm >= 1, 0.99 / norm, 1.0)[..., None]
    images = chaos_game(varied, np.repeat(active[list(chosen)], n, axis=0), spec, np.concatenate(draws, axis=1))
    images[flips[:, 0]] = images[flips[:, 0], :, ::-1]
    images[flips[:, 1]] = images[flips[:, 1], ::-1, :]
    return images[:, None]
