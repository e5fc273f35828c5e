"""Benchmark: the off-grid sampler against the authors' per-box crop and resize; PART's image step.

Side by side in one run, one thread (``torch.set_num_threads(1)``), median of interleaved repeats:

* **sampler**: :class:`partnd.patches.sampling.OffGridSampler` on a batch (integer boxes;
fixed-size boxes
  are exact slices, scaled boxes an anti-aliased separable resample by the compiled kernel that
  applies each box's filter taps, :mod:`partnd.patches.integer_box_resize`; with scaled boxes the
  same
  sampler forced to the kernel's fallback, dense matrix products grouped by extent, is timed in
  the same turns) against the authors' style,
  a Python loop over images and boxes that crops each box and resizes it with
  ``skimage.transform.resize(..., anti_aliasing=True)``, on the same number of boxes of the same
  sizes. Settings: CIFAR (64 boxes in 32 x 32, P = 4; fixed size, and sides in [2, 8]) and
  ImageNet (196 boxes with sides in [8, 32] in 224 x 224, P = 16; batch 32 and 8). Printed: ms
  per image, on the process's CPU time by default (one thread: a shared machine's other jobs
  barely change it), and the speed-up (goal >= 20x).
* **share of a PART step**: the sampler's time on a batch over a whole ViT-B/16 PART training
  step (forward, backward, AdamW; scale boxes on) on the same batch (goal < 5%).
* **step ratio**: a PART step of ViT-S/4 on 32 x 32 (64 patches, scale boxes on, 2048 pairs)
  against a bare ViT-S step on 64 ready-cut patches (goal >= 0.8).

Usage::

    python benchmarks/bench_sampler.py
    python benchmarks/bench_sampler.py --repeats 25 --vit-b-batch 8
    python benchmarks/bench_sampler.py --skip-vit-b        # ViT-B steps take seconds on a CPU
    python benchmarks/bench_sampler.py --samplers-only     # the sampler rows alone
"""

from __future__ import annotations

import argparse
import os
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any
from unittest import mock

import numpy as np
import torch
from bench_objective_step import training_step

from partnd.engine.config import PretrainConfig
from partnd.objectives import build_encoder, build_objective
from partnd.patches import sampling
from partnd.patches.integer_box_resize import resize_integer_boxes
from partnd.patches.sampling import OffGridSampler
from partnd.recipes.bench_support import (
    CLOCKS,
    interleaved_samples,
    interleaved_times,
    ratio_spread,
)
from partnd.signal_info import SignalSpec

SCALE_RANGE = (0.5, 2.0)


@dataclass(frozen=True)
class Setting:
    """A sampling setting.

    Attributes:
        name: Row label.
        size: Image side.
        patch: Patch size P.
        boxes: Boxes per image N.
        scale: Side range in units of P (``None``: fixed P x P boxes).
        batch: Images sampled per call of partnd's sampler.
        author_images: Images the authors' loop processes per timed call.
    """

    name: str
    size: int
    patch: int
    boxes: int
    scale: tuple[float, float] | None
    batch: int
    author_images: int


SETTINGS = (
    Setting("CIFAR 32x32, 64 boxes of 4 px", 32, 4, 64, None, 256, 32),
    Setting("CIFAR 32x32, 64 boxes of 2-8 px", 32, 4, 64, SCALE_RANGE, 256, 32),
    Setting("ImageNet 224x224, 196 boxes of 8-32 px", 224, 16, 196, SCALE_RANGE, 32, 4),
    Setting("ImageNet 224x224, 196 boxes of 8-32 px", 224, 16, 196, SCALE_RANGE, 8, 4),
)


def author_boxes(setting: Setting, images: int, rng: np.random.Generator) -> np.ndarray:
    """Integer boxes as the authors drew them: ``[images, N, 4]`` rows ``(y0, x0, h, w)``, each
    side uniform among the integers of ``[a P, b P]`` (or P), the start uniform inside."""
    low, high = setting.scale or (1.0, 1.0)
    sides = rng.integers(
        int(np.ceil(low * setting.patch)),
        int(high * setting.patch) + 1,
        size=(images, setting.boxes, 2),
    )
    sides = np.minimum(sides, setting.size)
    starts = (rng.random((images, setting.boxes, 2)) * (setting.size - sides + 1)).astype(int)
    return np.concatenate([starts, sides], axis=-1)


def authors_sampler(images: np.ndarray, boxes: np.ndarray, patch: int) -> np.ndarray:
    """The authors' style: per image, per box, a crop and an anti-aliased resize to P x P.

    Args:
        images: ``[B, H, W, C]`` float32.
        boxes: ``[B, N, 4]`` ``(y0, x0, h, w)``.
        patch: P.

    Returns:
        ``[B, N, P, P, C]`` patches.
    """
    from skimage.transform import resize

    batch, count = boxes.shape[:2]
    out = np.empty((batch, count, patch, patch, images.shape[-1]), dtype=np.float32)
    for b in range(batch):
        for n, (y0, x0, h, w) in enumerate(boxes[b]):
            crop = images[b, y0 : y0 + h, x0 : x0 + w]
            out[b, n] = resize(crop, (patch, patch), anti_aliasing=True)
    return out


def with_products(call: Callable[[], Any]) -> Callable[[], None]:
    """``call`` with the sampler's whole-sample boxes resampled by the dense matrix products (the
    fallback where numba is missing) instead of the compiled kernel."""
    products = partial(resize_integer_boxes, method="products")

    def run() -> None:
        with mock.patch.object(sampling, "resize_integer_boxes", products):
            call()

    return run


def sampler_rows(repeats: int, clock: str) -> list[dict[str, Any]]:
    """ms per image of both samplers in every setting (and of the sampler on the matrix-product
    path where boxes are scaled), and the speed-ups (median, and the lowest and highest ratio of
    two calls timed in the same turn)."""
    rng = np.random.default_rng(0)
    rows = []
    for setting in SETTINGS:
        x = torch.randn(setting.batch, 3, setting.size, setting.size)
        sampler = OffGridSampler(2, setting.patch, setting.boxes, scale_range=setting.scale)
        generator = torch.Generator().manual_seed(0)
        images = rng.standard_normal(
            (setting.author_images, setting.size, setting.size, 3), dtype=np.float32
        )
        boxes = author_boxes(setting, setting.author_images, rng)
        ours = partial(sampler, x, generator, validate=False)
        timed = {"ours": ours, "theirs": partial(authors_sampler, images, boxes, setting.patch)}
        if setting.scale is not None:
            timed["products"] = with_products(ours)
        samples = interleaved_samples(timed, repeats, 1, torch.device("cpu"), clock)
        per_image = {
            name: [
                1e3 * t / (setting.author_images if name == "theirs" else setting.batch)
                for t in times
            ]
            for name, times in samples.items()
        }
        ours_ms, theirs_ms = (
            statistics.median(per_image["ours"]),
            statistics.median(per_image["theirs"]),
        )
        row: dict[str, Any] = {
            "setting": setting.name,
            "batch": setting.batch,
            "partnd_ms_per_image": ours_ms,
            "authors_ms_per_image": theirs_ms,
            "speedup": theirs_ms / ours_ms,
            "spread": ratio_spread(per_image["theirs"], per_image["ours"]),
        }
        if "products" in per_image:
            products_ms = statistics.median(per_image["products"])
            row["products_ms_per_image"] = products_ms
            row["products_speedup"] = theirs_ms / products_ms
        rows.append(row)
    return rows


def _part_step(
    preset: str, spatial: int, batch: int, **overrides: Any
) -> tuple[Callable[[], None], Callable[[], None], Any]:
    """A PART training step of ``preset`` with scale boxes, its sampling call, and its model."""
    config = PretrainConfig.preset(
        preset,
        scale_range=SCALE_RANGE,
        scale_targets=True,
        precision="fp32",
        **overrides,
    )
    torch.manual_seed(0)
    model = build_objective(config, SignalSpec(3, (spatial, spatial))).train()
    inputs = torch.randn(batch, 3, spatial, spatial)
    generator = torch.Generator().manual_seed(0)
    device = torch.device("cpu")
    step = training_step(model, lambda: model(inputs, generator=generator).loss, device, "fp32")
    return step, lambda: model.sample(inputs, generator), config


def vit_b_share(batch: int, repeats: int, clock: str) -> dict[str, float]:
    """The sampler's time over a ViT-B/16 PART step (224 x 224, 196 scale boxes)."""
    step, sample, _ = _part_step("images_imagenet", 224, batch)
    timed = {"step": step, "sample": sample}
    seconds = interleaved_times(timed, repeats, 1, torch.device("cpu"), clock)
    return {
        "batch": batch,
        "step_s": seconds["step"],
        "sampling_s": seconds["sample"],
        "share": seconds["sample"] / seconds["step"],
    }


def vit_s_ratio(batch: int, repeats: int, clock: str) -> dict[str, float]:
    """A ViT-S/4 PART step (64 scale boxes in 32 x 32) against a bare ViT-S step on 64 tiles."""
    device = torch.device("cpu")
    step, sample, config = _part_step("images_cifar", 32, batch)
    torch.manual_seed(0)
    encoder = build_encoder(config, SignalSpec(3, (32, 32))).train()
    patches = torch.randn(batch, 64, 3, 4, 4)

    def bare_loss() -> torch.Tensor:
        return encoder.forward_features(patches).float().square().mean()

    timed = {"part": step, "bare": training_step(encoder, bare_loss, device, "fp32")}
    timed["sample"] = sample
    seconds = interleaved_times(timed, repeats, 1, device, clock)
    return {
        "batch": batch,
        "part_samples_per_s": batch / seconds["part"],
        "bare_samples_per_s": batch / seconds["bare"],
        "ratio": seconds["bare"] / seconds["part"],
        "sampling_share": seconds["sample"] / seconds["part"],
    }


def main(argv: list[str] | None = None) -> None:
    """Parse options, run the benchmarks and print the numbers."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15, help="timed calls (median)")
    parser.add_argument("--vit-b-batch", type=int, default=4, help="batch of the ViT-B step")
    parser.add_argument("--vit-s-batch", type=int, default=64, help="batch of the ViT-S steps")
    parser.add_argument("--skip-vit-b", action="store_true", help="no ViT-B step")
    parser.add_argument(
        "--samplers-only", action="store_true", help="the sampler rows alone (no model steps)"
    )
    parser.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default="cpu",
        help="clock of every timing: cpu (this process's CPU time; one thread, so other jobs on a "
        "shared machine barely change it) or wall",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print(
        f"torch {torch.__version__}, 1 thread, median of {args.repeats}, samplers on the "
        f"{args.clock} clock; load average {os.getloadavg()[0]:.1f}\n"
    )
    print("Off-grid sampler (partnd) vs per-box crop + skimage resize(anti_aliasing) (authors)")
    print(
        "(products: the same sampler on the dense matrix products, the path without numba)\n"
        f"{'setting':<42} {'batch':>5} {'partnd ms/img':>14} {'products ms/img':>16} "
        f"{'authors ms/img':>15} {'speed-up':>9} {'spread':>12} {'products':>9}"
    )
    for row in sampler_rows(args.repeats, args.clock):
        products = (
            (f"{row['products_ms_per_image']:>16.4f}", f"{row['products_speedup']:>8.1f}x")
            if "products_ms_per_image" in row
            else (f"{'-':>16}", f"{'-':>9}")
        )
        print(
            f"{row['setting']:<42} {row['batch']:>5} {row['partnd_ms_per_image']:>14.4f} "
            f"{products[0]} {row['authors_ms_per_image']:>15.3f} {row['speedup']:>8.1f}x "
            f"{row['spread'][0]:5.1f}-{row['spread'][1]:<5.1f} {products[1]}"
        )
    if args.samplers_only:
        return
    if not args.skip_vit_b:
        share = vit_b_share(args.vit_b_batch, max(2, args.repeats // 2), args.clock)
        print(
            f"\nViT-B/16 PART step (224x224, 196 scale boxes, batch {share['batch']}): "
            f"step {share['step_s']:.2f} s, sampling {1e3 * share['sampling_s']:.1f} ms = "
            f"{100 * share['share']:.2f}% of the step (goal < 5%)"
        )
    ratio = vit_s_ratio(args.vit_s_batch, args.repeats, args.clock)
    print(
        f"\nViT-S/4 PART step (32x32, 64 scale boxes, 2048 pairs, batch {ratio['batch']}): "
        f"{ratio['part_samples_per_s']:.1f} samples/s; bare ViT-S step (64 tiles): "
        f"{ratio['bare_samples_per_s']:.1f} samples/s; ratio {ratio['ratio']:.2f} (goal >= 0.8); "
        f"sampling {100 * ratio['sampling_share']:.2f}% of the PART step"
    )


if __name__ == "__main__":
    main()
