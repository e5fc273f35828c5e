"""Benchmark: each pretraining method's training step against a bare encoder step.

For a preset (``eeg_sleep``: ``vit_eeg_12m``, 6 x 3000 inputs, P = 100; ``images_cifar``:
ViT-S/4 on 3 x 32 x 32) this times, interleaved in one run (A, B, C, A, B, C, ...), one full
optimiser step of every method (its own patching, masking, heads or decoders, loss, backward,
AdamW) and two bare encoder steps (ready-cut patches, a mean-square stand-in loss, backward, AdamW):

* **bare (grid)**: the on-grid tiling (30 tokens for EEG, 64 for CIFAR), what a supervised or
  fine-tuning step costs;
* **bare (N)**: the method's own number of patches when it differs (PART's 40 EEG patches).

It prints samples/s and each method's ratio to the bare step with the same number of tokens
(higher is faster; the median over the repeats, and the lowest and highest ratio of two calls timed
in the same turn); goals: MAE above 1 (its encoder sees a quarter of the tokens), PART at least
0.9, every other method at least 0.8. Also the share of PART's step spent sampling patches.

Next to samples/s it prints each step's **model FLOPs utilisation**: the FLOPs of one step
(forward and backward, counted by ``torch.utils.flop_counter.FlopCounterMode`` on the eager
module: matrix products and attention, the arithmetic that matters) per second of the timed
step, over the device's dense bf16 peak (:data:`PEAK_BF16_TFLOPS` by device name; on a CPU the
rate of a large bf16 matrix product measured at the start, or ``--peak-tflops``).

Each method's step draws its boxes, pairs and masks first (``Objective.draw``) and runs the
forward on them, as the engine does (the forward is then one compiled graph).

``--compile MODE`` compiles every timed module the way ``TrainConfig.compile`` does (in place,
:mod:`partnd.engine.compilation`): each method's objective and the bare steps' encoder loss
alike, so the ratios stay fair; the warm-up then includes the compilation (two more warm-up
steps are added for CUDA-graph recording).

Usage::

    python benchmarks/bench_objective_step.py --preset eeg_sleep --batch-size 256 --steps 3
    python benchmarks/bench_objective_step.py --preset images_cifar --precision bf16
    python benchmarks/bench_objective_step.py --device cuda --steps 20
    python benchmarks/bench_objective_step.py --device cuda --steps 20 --compile default
    python benchmarks/bench_objective_step.py --threads 1 --clock cpu --batch-size 32  # loaded CPU
    python benchmarks/bench_objective_step.py --device cuda --compile default --peak-tflops 989
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from partnd.engine.compilation import compile_module, mark_step
from partnd.engine.config import PretrainConfig
from partnd.engine.distributed import resolve_device
from partnd.engine.optim import build_optimizer
from partnd.engine.precision import PRECISIONS, autocast, resolve_precision
from partnd.objectives import build_encoder, build_objective, list_objectives
from partnd.recipes.bench_support import (
    CLOCKS,
    add_compile_option,
    device_description,
    interleaved_samples,
    ratio_spread,
    synchronize,
)
from partnd.signal_info import SignalSpec

SHAPES = {"eeg_sleep": (6, (3000,)), "images_cifar": (3, (32, 32))}


#: Dense bf16 peak (TFLOP/s, no sparsity) by a substring of ``torch.cuda.get_device_name``,
#: first match wins (vendor data sheets).
PEAK_BF16_TFLOPS = {
    "H100 PCIe": 756.0,
    "H100": 989.0,  # SXM
    "H200": 989.0,
    "A100": 312.0,
    "L40S": 362.0,
    "A10G": 70.0,
}


def step_flops(model: torch.nn.Module, compute_loss: Callable[[], torch.Tensor]) -> int:
    """FLOPs of one forward and backward of ``compute_loss`` (an eager module: compiled
    kernels are not seen by the counter); the gradients are cleared after."""
    counter = FlopCounterMode(display=False)
    with counter:
        compute_loss().float().backward()
    model.zero_grad(set_to_none=True)
    return int(counter.get_total_flops())


def measured_matmul_tflops(
    device: torch.device, clock: str = "wall", size: int = 1024, repeats: int = 5
) -> float:
    """TFLOP/s of the fastest of ``repeats`` bf16 ``size``-square matrix products on
    ``device`` timed on ``clock`` (the clock the steps are timed on; a CPU's attainable peak,
    for the utilisation where no data sheet applies)."""
    now = CLOCKS[clock]
    a = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    b = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    best = math.inf
    for _ in range(repeats + 1):
        synchronize(device)
        start = now()
        a @ b
        synchronize(device)
        best = min(best, now() - start)
    return 2 * size**3 / max(best, 1e-9) / 1e12


def peak_tflops(
    device: torch.device, given: float | None = None, clock: str = "wall"
) -> tuple[float, str]:
    """The bf16 peak to divide by and where it comes from: ``given``, the data sheet of the
    CUDA device (:data:`PEAK_BF16_TFLOPS`), else a matrix product measured on ``clock``."""
    if given is not None:
        return given, "given"
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        for key, value in PEAK_BF16_TFLOPS.items():
            if key in name:
                return value, f"{key} data sheet"
    return measured_matmul_tflops(device, clock), f"measured bf16 matmul, {clock} clock"


def training_step(
    model: torch.nn.Module,
    compute_loss: Callable[[], torch.Tensor],
    device: torch.device,
    precision: str,
    compile_mode: str = "off",
) -> Callable[[], None]:
    """One optimiser step of ``model`` (forward under autocast, backward, AdamW).

    With ``compile_mode`` other than ``"off"``, the modules that ``compute_loss`` calls must
    have been compiled with :func:`~partnd.engine.compilation.compile_module`; each step then
    tells CUDA-graph replay that a new step begins, as the engine does.
    """
    optimizer = build_optimizer(model, lr=1e-4, weight_decay=0.05, betas=(0.9, 0.95))

    def step() -> None:
        mark_step(compile_mode)
        with autocast(device, precision):
            loss = compute_loss()
        optimizer.zero_grad(set_to_none=True)
        loss.float().backward()
        optimizer.step()

    return step


class BareLoss(torch.nn.Module):
    """A bare encoder step's forward: the encoder on ready-cut patches and a mean-square
    stand-in loss (a module, so that it compiles like an objective)."""

    def __init__(self, encoder: torch.nn.Module) -> None:
        super().__init__()
        self.encoder = encoder

    def forward(self, patches: torch.Tensor) -> torch.Tensor:
        """Args: patches: [B, N, C, *P]. Returns: the scalar stand-in loss."""
        return self.encoder.forward_features(patches).float().square().mean()


def run(
    preset: str,
    methods: list[str],
    batch_size: int,
    steps: int,
    warmup: int,
    device: torch.device,
    precision: str,
    clock: str = "wall",
    compile_mode: str = "off",
    peak: float | None = None,
) -> list[dict[str, Any]]:
    """Time every method and the bare steps (each compiled with ``compile_mode``); one row per
    method. With ``peak`` (TFLOP/s), each row also holds the model FLOPs utilisation ``mfu`` of
    the method and ``bare_mfu`` of its bare step."""
    channels, spatial = SHAPES[preset]
    spec = SignalSpec(channels, spatial)
    base = PretrainConfig.preset(preset)
    generator = torch.Generator(device=device).manual_seed(0)
    inputs = torch.randn(batch_size, channels, *spatial, device=device)
    patch = (
        (base.patch_size,) * len(spatial) if isinstance(base.patch_size, int) else base.patch_size
    )
    grid_tokens = math.prod(length // p for length, p in zip(spatial, patch, strict=True))
    part_tokens = base.num_patches or grid_tokens
    token_counts = {part_tokens if method == "part" else grid_tokens for method in methods}
    timed: dict[str, Callable[[], None]] = {}
    flops: dict[str, int] = {}
    for tokens in sorted(token_counts):
        torch.manual_seed(0)
        bare = BareLoss(build_encoder(base, spec)).to(device).train()
        patches = torch.randn(batch_size, tokens, channels, *patch, device=device)

        def bare_loss(bare: Any = bare, patches: torch.Tensor = patches) -> torch.Tensor:
            return bare(patches)

        with autocast(device, precision):
            flops[f"bare_{tokens}"] = step_flops(bare, bare_loss)
        compile_module(bare, compile_mode)
        timed[f"bare_{tokens}"] = training_step(bare, bare_loss, device, precision, compile_mode)
    models = {}
    for method in methods:
        torch.manual_seed(0)
        model = build_objective(base.replace(method=method), spec).to(device).train()
        models[method] = model

        def loss(model: Any = model) -> torch.Tensor:
            # as the engine: the step's draws first (eager), then the forward on them
            return model(inputs, draws=model.draw(inputs, generator)).loss

        with autocast(device, precision):
            flops[method] = step_flops(model, loss)
        compile_module(model, compile_mode)
        timed[method] = training_step(model, loss, device, precision, compile_mode)
    if "part" in models:

        def sample() -> None:
            with autocast(device, precision):
                models["part"].sample(inputs, generator)

        timed["part_sampling"] = sample
    samples = interleaved_samples(timed, steps, warmup, device, clock)
    seconds = {name: statistics.median(values) for name, values in samples.items()}
    rows = []
    for method in methods:
        tokens = part_tokens if method == "part" else grid_tokens
        bare = seconds[f"bare_{tokens}"]
        row = {
            "method": method,
            "samples_per_s": batch_size / seconds[method],
            "bare_tokens": tokens,
            "bare_samples_per_s": batch_size / bare,
            "ratio": bare / seconds[method],
            "ratio_spread": ratio_spread(samples[f"bare_{tokens}"], samples[method]),
            "parameters_M": sum(p.numel() for p in models[method].parameters()) / 1e6,
        }
        if method == "part":
            row["sampling_share"] = seconds["part_sampling"] / seconds["part"]
        row["step_tflop"] = flops[method] / 1e12
        row["bare_step_tflop"] = flops[f"bare_{tokens}"] / 1e12
        if peak is not None:
            row["mfu"] = flops[method] / seconds[method] / (peak * 1e12)
            row["bare_mfu"] = flops[f"bare_{tokens}"] / bare / (peak * 1e12)
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> None:
    """Parse options, run the benchmark and print a table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(SHAPES), default="eeg_sleep")
    parser.add_argument(
        "--methods",
        nargs="+",
        default=list_objectives(data="items"),
        help="objectives on single inputs (part_windows reads segments of windows: "
        "benchmarks/bench_part_windows_step.py)",
    )
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--steps", type=int, default=5, help="timed steps of each kind (median)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:K")
    parser.add_argument("--precision", choices=PRECISIONS, default="auto")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall", help=CLOCKS.__doc__)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (CPU)")
    add_compile_option(
        parser,
        "compile every timed module as TrainConfig.compile does (the methods and the bare "
        "steps alike)",
    )
    parser.add_argument(
        "--peak-tflops",
        type=float,
        default=None,
        help="the device's dense bf16 peak for the utilisation (default: the data sheet of a "
        "known GPU, else a measured bf16 matrix product)",
    )
    parser.add_argument("--json", default=None, help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    args.precision = resolve_precision(args.precision, device)
    where = device_description(device)
    print(
        f"{args.preset}: device {device} ({where}), {args.precision}, batch {args.batch_size}, "
        f"{args.steps} timed + {args.warmup} warm-up steps each, interleaved, {args.clock} "
        f"clock, compile {args.compile}; load average {os.getloadavg()[0]:.1f}"
    )
    peak, peak_source = peak_tflops(device, args.peak_tflops, args.clock)
    print(f"bf16 peak {peak:.3g} TFLOP/s ({peak_source})")
    rows = run(
        args.preset,
        args.methods,
        args.batch_size,
        args.steps,
        args.warmup + (2 if args.compile != "off" else 0),
        device,
        args.precision,
        args.clock,
        args.compile,
        peak,
    )
    print(
        f"{'method':>10} {'params M':>9} {'samples/s':>10} {'bare/s':>9} {'tokens':>7} "
        f"{'ratio':>6} {'spread':>11} {'MFU':>6} {'bare MFU':>8}"
    )
    for row in rows:
        extra = (
            f"  (sampling {row['sampling_share']:.1%} of the step)"
            if "sampling_share" in row
            else ""
        )
        print(
            f"{row['method']:>10} {row['parameters_M']:9.2f} {row['samples_per_s']:10.1f} "
            f"{row['bare_samples_per_s']:9.1f} {row['bare_tokens']:7d} {row['ratio']:6.2f} "
            f"{row['ratio_spread'][0]:5.2f}-{row['ratio_spread'][1]:<5.2f} "
            f"{row['mfu']:6.1%} {row['bare_mfu']:8.1%}{extra}"
        )
    if args.json is not None:
        settings = {"preset": args.preset, "device": where, "precision": args.precision}
        settings.update({"peak_tflops": peak, "peak_source": peak_source})
        settings.update({"batch_size": args.batch_size, "compile": args.compile})
        with open(args.json, "w") as handle:
            json.dump({**settings, "rows": rows}, handle, indent=1)


if __name__ == "__main__":
    main()
