"""How fast the fractal generator renders (issue 38 asks for at least 2,000 images/s on 2 cores).

    python benchmarks/fractal_rate.py [--categories 40] [--per-category 100] [--batch 20] [--reps 3]

Renders the same categories one at a time (the reference) and ``--batch`` categories per chaos game, alternating,
in this process, and prints each one's images/s (best of ``--reps``) and their ratio; the bytes are checked equal
(a category's images do not depend on its batch). Time nothing while another process works the cores.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from pipeline.data.fractals import FractalSpec, categories, render_categories


def rate(render, count: int, reps: int) -> tuple[float, np.ndarray]:
    best, images = float("inf"), None
    for _ in range(reps):
        start = time.perf_counter()
        images = render()
        best = min(best, time.perf_counter() - start)
    return count / best, images


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--categories", type=int, default=40)
    parser.add_argument("--per-category", type=int, default=100)
    parser.add_argument("--batch", type=int, default=20, help="categories per chaos game")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    spec = FractalSpec(seed=0, categories=args.categories, per_category=args.per_category)
    params, active = categories(spec)
    count = args.categories * args.per_category

    def one_at_a_time() -> np.ndarray:
        return np.concatenate(
            [render_categories(spec, params, active, range(c, c + 1)) for c in range(spec.categories)]
        )

    def batched() -> np.ndarray:
        return np.concatenate([render_categories(spec, params, active, range(c, min(c + args.batch, spec.categories)))
                               for c in range(0, spec.categories, args.batch)])  # fmt: skip

    reference, reference_images = rate(one_at_a_time, count, args.reps)
    batch_rate, batch_images = rate(batched, count, args.reps)
    assert np.array_equal(reference_images, batch_images)
    print(f"one category a game: {reference:,.0f} images/s; {args.batch} a game: {batch_rate:,.0f} images/s "
          f"({batch_rate / reference:.2f}x); {count:,} images of {spec.size}x{spec.size}, "
          f"{spec.points} points")  # fmt: skip


if __name__ == "__main__":
    main()
