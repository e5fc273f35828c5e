"""Benchmark: a PART-across-windows training step against a bare step of the same encoders.

Times, interleaved in one run (A, B, A, B, ...), two optimiser steps (forward under autocast,
backward, AdamW) of the same hierarchical encoder (window ViT + temporal ViT) on the same number
of windows:

* **part_windows**: the whole objective on a batch of segments ``[B, C, S*T]``: drawing ``N``
  windows per segment at off-grid integer starts, normalising each, encoding, drawing the pairs
  (anchored: hiding slots, pairs with a hidden target, the floor's predictions), the relative
  head (the preset's pairwise MLP, or ``--head``), the loss and its diagnostics;
* **bare**: ready-cut windows ``[B, N, C, T]`` with their slots through the same encoder, a
  mean-square stand-in loss;
* **part_joint** (with ``--joint``): PART within and across windows, the same step plus PART
  within every drawn window (``method="part_joint"``), to price issue 42's candidate;
* **held_window** (with ``--held-window``): the same objective with its window encoder held
  (``trained_levels="temporal"``: no gradient through the window ViT), another candidate.

It prints windows/s of both and their ratio (goal: at least 0.9), the share of the step
spent drawing and normalising windows, and the model FLOPs utilisation of both steps
(``bench_objective_step.step_flops`` over the device's bf16 peak). The objective draws its
windows and pairs first (``Objective.draw``), then runs the forward on them, as the engine does;
``--compile MODE`` compiles both steps as ``TrainConfig.compile`` does.

Usage::

    python benchmarks/bench_part_windows_step.py --batch-size 8 --steps 5
    python benchmarks/bench_part_windows_step.py --demo --batch-size 16  # the demo's encoder
    python benchmarks/bench_part_windows_step.py --head cross_attention  # the paper's head
    python benchmarks/bench_part_windows_step.py --demo --joint  # part_joint's cost beside it
    python benchmarks/bench_part_windows_step.py --demo --held-window  # the held window encoder
    python benchmarks/bench_part_windows_step.py --device cuda --batch-size 64 --steps 20
    python benchmarks/bench_part_windows_step.py --device cuda --batch-size 64 --compile default
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

import torch
from bench_objective_step import peak_tflops, step_flops, training_step

from partnd.engine.compilation import compile_module
from partnd.engine.config import PretrainConfig
from partnd.engine.distributed import resolve_device
from partnd.engine.precision import PRECISIONS, autocast, resolve_precision
from partnd.objectives import CrossWindowPART, build_objective
from partnd.recipes.bench_support import (
    add_compile_option,
    device_description,
    interleaved_times,
)
from partnd.recipes.sleep_study import DEMO_ENCODER_OVERRIDES
from partnd.signal_info import SignalSpec

CHANNELS = 6


class BareWindows(torch.nn.Module):
    """The bare step's forward: the hierarchical encoder on ready-cut windows (with their slots)
    and a mean-square stand-in loss (a module, so that it compiles like the objective)."""

    def __init__(self, encoder: torch.nn.Module, positions: torch.Tensor | None) -> None:
        super().__init__()
        self.encoder = encoder
        self.positions = positions

    def forward(self, patches: torch.Tensor) -> torch.Tensor:
        """Args: patches: [B, N, C, T] windows. Returns: the scalar stand-in loss."""
        return self.encoder.forward_features(patches, self.positions).float().square().mean()


def run(
    config: PretrainConfig,
    batch_size: int,
    steps: int,
    warmup: int,
    device: torch.device,
    compile_mode: str = "off",
    peak: float | None = None,
    variants: Mapping[str, PretrainConfig] | None = None,
) -> dict[str, Any]:
    """Time the objective's step, the bare step and the window sampling (both steps compiled
    with ``compile_mode``); with ``peak`` (TFLOP/s) also their FLOPs utilisation; with
    ``variants`` (name -> config) also each variant objective's step on the same segments
    (``<name>_per_s`` and ``<name>_ratio``, its speed over part_windows')."""
    spec = SignalSpec(CHANNELS, (config.segment_windows * config.window_samples,))
    segments = torch.randn(batch_size, *spec.item_shape, device=device)
    generator = torch.Generator(device=device).manual_seed(0)
    models = {}
    for name in ("part_windows", "bare"):
        torch.manual_seed(0)
        model = build_objective(config, spec).to(device).train()
        assert isinstance(model, CrossWindowPART)
        models[name] = model
    objective, bare = models["part_windows"], models["bare"].hierarchical
    windows = objective.sample(segments, generator)
    patches, slots = windows.patches, windows.grid_index
    positions = slots if bare.pos_embed is not None else None

    def objective_loss() -> torch.Tensor:
        return objective(segments, draws=objective.draw(segments, generator)).loss

    bare_step = BareWindows(bare, positions)

    def bare_loss() -> torch.Tensor:
        return bare_step(patches)

    with autocast(device, config.precision):
        flops = {"part_windows": step_flops(objective, objective_loss)}
        flops["bare"] = step_flops(bare_step, bare_loss)
    compile_module(objective, compile_mode)
    compile_module(bare_step, compile_mode)

    def sample() -> None:
        with autocast(device, config.precision):
            objective.sample(segments, generator)

    timed = {
        "part_windows": training_step(
            objective, objective_loss, device, config.precision, compile_mode
        ),
        "bare": training_step(bare_step, bare_loss, device, config.precision, compile_mode),
        "sampling": sample,
    }
    for name, variant in (variants or {}).items():
        timed[name] = _variant_step(variant, spec, segments, generator, device, compile_mode)
    seconds = interleaved_times(timed, steps, warmup, device)
    count = batch_size * config.num_windows
    extra: dict[str, float] = {}
    for name in variants or {}:
        extra[f"{name}_per_s"] = count / seconds[name]
        extra[f"{name}_ratio"] = seconds["part_windows"] / seconds[name]
    if peak is not None:
        extra.update({f"{name}_mfu": flops[name] / seconds[name] / (peak * 1e12) for name in flops})
    return {
        **extra,
        "step_tflop": flops["part_windows"] / 1e12,
        "segments_per_s": batch_size / seconds["part_windows"],
        "windows_per_step": count,
        "part_windows_per_s": count / seconds["part_windows"],
        "bare_per_s": count / seconds["bare"],
        "ratio": seconds["bare"] / seconds["part_windows"],
        "sampling_share": seconds["sampling"] / seconds["part_windows"],
        "parameters_M": sum(p.numel() for p in objective.parameters()) / 1e6,
    }


def _variant_step(
    config: PretrainConfig,
    spec: SignalSpec,
    segments: torch.Tensor,
    generator: torch.Generator,
    device: torch.device,
    compile_mode: str,
) -> Any:
    """A timed training step of the objective ``config`` builds, on ``segments``."""
    torch.manual_seed(0)
    model = build_objective(config, spec).to(device).train()
    compile_module(model, compile_mode)

    def loss() -> torch.Tensor:
        return model(segments, draws=model.draw(segments, generator)).loss

    return training_step(model, loss, device, config.precision, compile_mode)


def main(argv: list[str] | None = None) -> None:
    """Parse options, run the benchmark and print the result."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--demo", action="store_true", help="the demo's window encoder")
    parser.add_argument("--batch-size", type=int, default=8, help="segments per step")
    parser.add_argument("--steps", type=int, default=5, help="timed steps of each kind (median)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:K")
    parser.add_argument("--precision", choices=PRECISIONS, default="auto")
    parser.add_argument(
        "--head", choices=PretrainConfig.HEADS, help="the relative head (default: the preset's)"
    )
    add_compile_option(parser, "compile both steps as TrainConfig.compile does")
    parser.add_argument(
        "--joint", action="store_true", help="also time part_joint's step (PART within too)"
    )
    parser.add_argument(
        "--held-window",
        action="store_true",
        help="also time part_windows with its window encoder held (trained_levels=temporal)",
    )
    parser.add_argument(
        "--peak-tflops", type=float, default=None, help="the device's dense bf16 peak"
    )
    args = parser.parse_args(argv)
    device = resolve_device(args.device)
    args.precision = resolve_precision(args.precision, device)
    config = PretrainConfig.preset("eeg_sleep_windows", precision=args.precision)
    if args.demo:
        config = config.replace(encoder_overrides=DEMO_ENCODER_OVERRIDES)
    if args.head is not None:
        config = config.replace(head=args.head)
    where = device_description(device)
    print(
        f"eeg_sleep_windows{' (demo window encoder)' if args.demo else ''}: device {device} "
        f"({where}), {args.precision}, {config.head} head, {args.batch_size} segments of "
        f"{config.segment_windows} windows, {config.num_windows} drawn each, {args.steps} timed "
        f"+ {args.warmup} warm-up steps each, interleaved"
    )
    peak, peak_source = peak_tflops(device, args.peak_tflops)
    warmup = args.warmup + (2 if args.compile != "off" else 0)
    variants = {}
    if args.joint:
        variants["part_joint"] = config.replace(method="part_joint")
    if args.held_window:
        variants["held_window"] = config.replace(trained_levels="temporal")
    row = run(config, args.batch_size, args.steps, warmup, device, args.compile, peak, variants)
    print(
        f"part_windows {row['part_windows_per_s']:.1f} windows/s, bare "
        f"{row['bare_per_s']:.1f} windows/s ({row['windows_per_step']} windows a step, "
        f"{row['parameters_M']:.2f} M parameters): ratio {row['ratio']:.2f} "
        f"(drawing and normalising windows {row['sampling_share']:.1%} of the step); "
        f"compile {args.compile}; MFU {row['part_windows_mfu']:.1%}, bare {row['bare_mfu']:.1%} "
        f"of {peak:.3g} TFLOP/s ({peak_source})"
    )
    what = {
        "part_joint": f"PART within {config.num_patches} patches of every drawn window, "
        f"{config.within_pairs} pairs",
        "held_window": "the window encoder held, the temporal level and head trained",
    }
    for name in variants:
        print(
            f"{name} {row[f'{name}_per_s']:.1f} windows/s: {row[f'{name}_ratio']:.2f} of "
            f"part_windows' ({what[name]})"
        )


if __name__ == "__main__":
    main()
