"""Benchmark: a full PART training step against a bare encoder training step.

For the paper's EEG setup (``vit_eeg_12m``, 6 channels, 30 s at 100 Hz, 40 patches of 100 samples)
this times, in fp32 and in bf16 autocast:

* **bare**: encoder forward on 40 ready-cut patches ``[B, 40, 6, 100]``, a mean-square loss over its
  tokens, backward, AdamW step — the cost of the backbone alone;
* **PART**: the whole step of :func:`partnd.pretraining` — off-grid sampling from ``[B, 6, 3000]``,
  encoder, cross-attention head over ``num_pairs`` pairs, MSE, backward, AdamW step;
* **sampling**: the off-grid sampler alone (no gradient), reported as a fraction of the PART step.

Goal: PART >= 0.8x bare throughput, sampling < 5% of the step.

Usage::

    python benchmarks/bench_part_step.py --steps 3 --warmup 1
    python benchmarks/bench_part_step.py --device cuda --batch-size 256 --steps 20
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from partnd.data import SignalSpec
from partnd.engine.config import PretrainConfig
from partnd.engine.distributed import resolve_device
from partnd.engine.optim import build_optimizer
from partnd.models import ViTEncoder, create_encoder
from partnd.objectives import PARTModel, build_objective

CHANNELS, LENGTH, PATCH, NUM_PATCHES = 6, 3000, 100, 40


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _interleaved_times(
    steps: dict[str, Callable[[], Any]], repeats: int, warmup: int, device: torch.device
) -> dict[str, float]:
    """Median seconds per call of every step function, timed in turns (A, B, C, A, B, C, ...).

    Interleaving makes the ratios robust to load that changes during the run (a shared machine).
    """
    for _ in range(warmup):
        for step in steps.values():
            step()
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            _synchronize(device)
            start = time.perf_counter()
            step()
            _synchronize(device)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def _autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager[Any]:
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16)


def _bare_loss(encoder: ViTEncoder, patches: torch.Tensor) -> torch.Tensor:
    """Stand-in loss of a bare encoder step: mean square of all output tokens."""
    return encoder.forward_features(patches).float().pow(2).mean()


def _part_loss(model: PARTModel, signals: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """The full PART loss: sampling, encoder, head and MSE."""
    return model(signals, generator=generator).loss


def _sample(
    model: PARTModel,
    signals: torch.Tensor,
    generator: torch.Generator,
    device: torch.device,
    precision: str,
) -> None:
    """Patch sampling alone, as done inside a PART step."""
    with _autocast(device, precision):
        model.sample(signals, generator)


def _training_step(
    compute_loss: Callable[[], torch.Tensor],
    optimizer: torch.optim.Optimizer,
    device: torch.device,
    precision: str,
) -> Callable[[], None]:
    """One optimiser step (forward under autocast, backward, update) as a zero-argument call."""

    def step() -> None:
        with _autocast(device, precision):
            loss = compute_loss()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def run(
    batch_size: int,
    steps: int,
    warmup: int,
    device: torch.device,
    precisions: list[str],
    num_pairs: int,
    head: str,
) -> list[dict[str, float | str]]:
    """Time bare, PART and sampling-only steps for every precision; return one row per precision."""
    generator = torch.Generator(device=device).manual_seed(0)
    signals = torch.randn(batch_size, CHANNELS, LENGTH, device=device)
    patches = torch.randn(batch_size, NUM_PATCHES, CHANNELS, PATCH, device=device)
    config = PretrainConfig.preset("eeg_sleep", num_pairs=num_pairs, head=head)
    rows: list[dict[str, float | str]] = []
    for precision in precisions:
        torch.manual_seed(0)
        encoder = create_encoder("vit_eeg_12m", in_chans=CHANNELS, patch_size=PATCH, ndim=1)
        encoder.to(device).train()
        bare_optimizer = build_optimizer(encoder, lr=1e-4, weight_decay=0.05, betas=(0.9, 0.95))

        bare_step = _training_step(
            functools.partial(_bare_loss, encoder, patches),
            bare_optimizer,
            device,
            precision,
        )
        model = build_objective(config, SignalSpec(CHANNELS, (LENGTH,))).to(device).train()
        part_optimizer = build_optimizer(model, lr=1e-4, weight_decay=0.05, betas=(0.9, 0.95))
        part_step = _training_step(
            functools.partial(_part_loss, model, signals, generator),
            part_optimizer,
            device,
            precision,
        )

        sample_step = functools.partial(_sample, model, signals, generator, device, precision)
        seconds = _interleaved_times(
            {"bare": bare_step, "part": part_step, "sampling": sample_step}, steps, warmup, device
        )
        bare, part, sampling = seconds["bare"], seconds["part"], seconds["sampling"]
        rows.append(
            {
                "precision": precision,
                "bare_samples_per_s": batch_size / bare,
                "part_samples_per_s": batch_size / part,
                "part_over_bare": bare / part,
                "sampling_fraction": sampling / part,
                "sampling_ms": 1000 * sampling,
                "encoder_params_M": sum(p.numel() for p in encoder.parameters()) / 1e6,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    """Parse options, run the benchmark and print a table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--steps", type=int, default=10, help="timed steps of each kind (median)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:K")
    parser.add_argument(
        "--precision", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"]
    )
    parser.add_argument("--num-pairs", type=int, default=1024, help="pairs per example")
    parser.add_argument("--head", default="cross_attention")
    args = parser.parse_args(argv)
    device = resolve_device(args.device)
    if device.type == "cuda":
        where = torch.cuda.get_device_name(device)
    else:
        where = f"{torch.get_num_threads()} threads"
    print(
        f"device {device} ({where}), "
        f"batch {args.batch_size}, {args.steps} timed + {args.warmup} warm-up steps, "
        f"{NUM_PATCHES} patches of {CHANNELS}x{PATCH}, head {args.head}, {args.num_pairs} pairs"
    )
    rows = run(
        args.batch_size, args.steps, args.warmup, device, args.precision, args.num_pairs, args.head
    )
    print(f"encoder parameters: {rows[0]['encoder_params_M']:.2f} M")
    print(
        f"{'precision':>9} {'bare/s':>9} {'PART/s':>9} {'PART/bare':>9} {'sampling':>9} {'ms':>7}"
    )
    for row in rows:
        print(
            f"{row['precision']:>9} {row['bare_samples_per_s']:9.1f} "
            f"{row['part_samples_per_s']:9.1f} {row['part_over_bare']:9.2f} "
            f"{row['sampling_fraction']:9.1%} {row['sampling_ms']:7.1f}"
        )


if __name__ == "__main__":
    main()
