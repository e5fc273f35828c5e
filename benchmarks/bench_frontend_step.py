"""Benchmark: the window encoder's front-ends, one training step each, side by side.

For each candidate front-end of ``bench_window_frontend.py`` (how a 1 s patch becomes a token)
this times, interleaved in one run (A, B, C, A, B, C, ...), one full optimiser step (forward,
backward, AdamW) of:

* ``finetune``: the supervised single-window classifier of the demo's window arm (the 128-wide,
  4-block ViT, 6 x 3000 windows tiled into 1 s patches, [CLS] linear head, cross-entropy);
* each ``--methods`` pretraining objective with that window encoder (the ``eeg_sleep`` preset
  with the demo's encoder, 512 pairs: PART's 40 off-grid patches, MAE's visible quarter, ...).

It prints samples/s and each candidate's ratio to the ``linear`` front-end (today's) on the same
step (higher is faster), and the parameters of the front-end itself.

Usage::

    python benchmarks/bench_frontend_step.py
    python benchmarks/bench_frontend_step.py --candidates linear spectral conv --methods part mae
    python benchmarks/bench_frontend_step.py --batch-size 64 --steps 5 --threads 2
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from bench_objective_step import training_step

from partnd.engine.config import PretrainConfig
from partnd.engine.precision import PRECISIONS, resolve_precision
from partnd.models import PatchClassifier, create_encoder
from partnd.objectives import build_objective
from partnd.recipes.bench_support import FRONTEND_CANDIDATES, interleaved_times
from partnd.recipes.sleep_study import DEMO_ENCODER_OVERRIDES
from partnd.signal_info import SignalSpec

CHANNELS, SAMPLES, CLASSES = 6, 3000, 5


def encoder_settings(name: str) -> tuple[int, dict[str, Any]]:
    """``(patch_size, encoder overrides)`` of candidate ``name`` on the demo's encoder."""
    settings = FRONTEND_CANDIDATES[name]
    patch_size = int(settings.get("patch_size", 100))
    return patch_size, {**DEMO_ENCODER_OVERRIDES, **settings.get("encoder", {})}


def steps_of(
    name: str, methods: list[str], batch_size: int, device: torch.device, precision: str
) -> tuple[dict[str, Callable[[], None]], int]:
    """One training step per kind for candidate ``name``, and the front-end's parameter count."""
    patch_size, overrides = encoder_settings(name)
    x = torch.randn(batch_size, CHANNELS, SAMPLES, device=device)
    labels = torch.randint(0, CLASSES, (batch_size,), device=device)
    torch.manual_seed(0)
    encoder = create_encoder(
        "vit_eeg_12m", in_chans=CHANNELS, patch_size=patch_size, ndim=1, **overrides
    )
    frontend_parameters = sum(p.numel() for p in encoder.patch_embed.parameters())
    classifier = PatchClassifier(encoder, CLASSES, spatial_shape=(SAMPLES,)).to(device).train()

    def classification_loss() -> torch.Tensor:
        return F.cross_entropy(classifier(x).float(), labels)

    steps = {"finetune": training_step(classifier, classification_loss, device, precision)}
    generator = torch.Generator(device=device).manual_seed(0)
    for method in methods:
        config = PretrainConfig.preset(
            "eeg_sleep",
            method=method,
            patch_size=patch_size,
            num_patches=40 * 100 // patch_size,
            encoder_overrides=overrides,
            num_pairs=512,
        )
        torch.manual_seed(0)
        model = build_objective(config, SignalSpec(CHANNELS, (SAMPLES,))).to(device).train()

        def loss(model: Any = model) -> torch.Tensor:
            return model(x, generator=generator).loss

        steps[method] = training_step(model, loss, device, precision)
    return steps, frontend_parameters


def main(argv: list[str] | None = None) -> None:
    """Parse options, time every candidate's steps and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--candidates",
        nargs="+",
        choices=sorted(FRONTEND_CANDIDATES),
        default=["linear", "spectral", "spectral_raw", "conv"],
    )
    parser.add_argument("--methods", nargs="+", default=["part", "mae"])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=5, help="timed steps of each kind (median)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    parser.add_argument("--threads", type=int, default=None, help="torch threads")
    parser.add_argument("--precision", choices=PRECISIONS, default="fp32")
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = torch.device("cpu")
    precision = resolve_precision(args.precision, device)
    timed: dict[str, Callable[[], None]] = {}
    parameters = {}
    for name in args.candidates:
        steps, parameters[name] = steps_of(name, args.methods, args.batch_size, device, precision)
        timed.update({f"{name}/{kind}": step for kind, step in steps.items()})
    print(
        f"CPU, {torch.get_num_threads()} threads, {precision}, batch {args.batch_size}, "
        f"{args.steps} timed + {args.warmup} warm-up steps each, interleaved"
    )
    seconds = interleaved_times(timed, args.steps, args.warmup, device)
    kinds = ["finetune", *args.methods]
    print(f"{'candidate':>13} {'front-end params':>16} " + " ".join(f"{k:>18}" for k in kinds))
    for name in args.candidates:
        cells = []
        for kind in kinds:
            rate = args.batch_size / seconds[f"{name}/{kind}"]
            base = seconds.get(f"linear/{kind}")
            ratio = f"x{base / seconds[f'{name}/{kind}']:.2f}" if base is not None else ""
            cells.append(f"{rate:9.1f}/s {ratio:>7}")
        print(f"{name:>13} {parameters[name]:16,d} " + " ".join(f"{c:>18}" for c in cells))


if __name__ == "__main__":
    main()
