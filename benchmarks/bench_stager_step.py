"""Benchmark: braindecode's window stagers beside partnd's window classifier, one step each.

The sample-efficiency study trains every row for the same number of optimiser steps, so what a
row costs is its step. This times, interleaved in one run (A, B, C, A, B, C, ...), one full
optimiser step (forward, backward, AdamW) on a batch of 6 x 3000 windows (30 s at 100 Hz, the
store's) of:

* ``partnd``: the study's single-window classifier (the demo's 128-wide, 4-block ViT with the
  study's front-end, ``--frontend``, [CLS] linear head);
* each ``--stagers`` window stager of :mod:`partnd.models.braindecode_stagers` (braindecode's
  own modules).

It prints each model's parameters, windows/s and its step time as a multiple of partnd's
(higher is slower).

Usage::

    python benchmarks/bench_stager_step.py --threads 1
    python benchmarks/bench_stager_step.py --stagers chambon2018 --batch-size 32 --steps 10
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
import torch.nn.functional as F
from bench_objective_step import training_step

from partnd.models import PatchClassifier, create_encoder
from partnd.models.braindecode_stagers import WindowStager
from partnd.recipes.bench_support import interleaved_times
from partnd.recipes.sleep_study import DEMO_ENCODER_OVERRIDES
from partnd.recipes.study_scales import STUDY_FRONTENDS

CHANNELS, SAMPLES, CLASSES, SFREQ = 6, 3000, 5, 100.0
WINDOW_STAGERS = sorted(WindowStager.classes)


def models(frontend: str, stagers: list[str]) -> dict[str, torch.nn.Module]:
    """partnd's window classifier with ``frontend``, then each stager, seeded."""
    torch.manual_seed(0)
    encoder = create_encoder(
        "vit_eeg_12m",
        in_chans=CHANNELS,
        patch_size=100,
        ndim=1,
        **{**DEMO_ENCODER_OVERRIDES, **STUDY_FRONTENDS[frontend]},
    )
    built: dict[str, torch.nn.Module] = {
        "partnd": PatchClassifier(encoder, CLASSES, spatial_shape=(SAMPLES,))
    }
    for name in stagers:
        torch.manual_seed(0)
        built[name] = WindowStager(
            name, n_chans=CHANNELS, n_outputs=CLASSES, n_times=SAMPLES, sfreq=SFREQ
        )
    return built


def main(argv: list[str] | None = None) -> None:
    """Parse options, time every model's step and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stagers", nargs="+", choices=WINDOW_STAGERS, default=WINDOW_STAGERS)
    parser.add_argument("--frontend", choices=sorted(STUDY_FRONTENDS), default="spectral_std")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=3, help="timed steps of each model (median)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    parser.add_argument("--threads", type=int, default=None, help="torch threads")
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = torch.device("cpu")
    x = torch.randn(args.batch_size, CHANNELS, SAMPLES)
    labels = torch.randint(0, CLASSES, (args.batch_size,))
    built = models(args.frontend, args.stagers)
    steps: dict[str, Callable[[], None]] = {}
    for name, model in built.items():
        model.train()

        def loss(model: torch.nn.Module = model) -> torch.Tensor:
            return F.cross_entropy(model(x).float(), labels)

        steps[name] = training_step(model, loss, device, "fp32")
    print(
        f"CPU, {torch.get_num_threads()} threads, fp32, batch {args.batch_size} windows "
        f"[{CHANNELS}, {SAMPLES}], {args.steps} timed + {args.warmup} warm-up steps each, "
        "interleaved"
    )
    seconds = interleaved_times(steps, args.steps, args.warmup, device)
    print(f"{'model':>14} {'parameters':>12} {'s/step':>8} {'windows/s':>10} {'x partnd':>9}")
    for name, model in built.items():
        parameters = sum(p.numel() for p in model.parameters())
        ratio = seconds[name] / seconds["partnd"]
        rate = args.batch_size / seconds[name]
        print(f"{name:>14} {parameters:12,d} {seconds[name]:8.3f} {rate:10.1f} {ratio:9.2f}")


if __name__ == "__main__":
    main()
