"""Benchmark: the sequence classifier against the single-window classifier.

Two measurements, side by side in one run (interleaved A, B, A, B, ...):

* **training step** on the same windows: one optimiser step of the sequence classifier on ``B``
  sequences of ``L`` windows (its window encoder, temporal encoder, head, loss over every window,
  backward, AdamW) against one step of the single-window classifier (the same window encoder on
  the grid, [CLS] head) on the same ``B * L`` windows; the ratio is windows/s of the sequence step
  over the single-window step (1.0: the temporal encoder costs nothing);
* **whole-night prediction**: windows per second of :meth:`SequenceClassifier.predict_night`
  (every window embedded once, every run of ``L`` windows read, probabilities averaged) and of
  the single-window classifier on the same night.

Defaults are the demo's models (the window ViT of ``vit_eeg_12m``'s shape narrowed as the demo's,
``temporal_small``, ``L = 21``, 6 x 3000 windows) on the CPU; training steps run under the
precision the demo trains with (``--precision auto``: bf16 where the CPU has bf16 kernels, else
fp32), prediction in fp32 as :func:`partnd.predict` runs it.

Usage::

    python benchmarks/bench_sequence.py
    python benchmarks/bench_sequence.py --context 21 --sequences 8 --night 900 --threads 2
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from partnd.engine.optim import build_optimizer
from partnd.engine.precision import PRECISIONS, autocast, resolve_precision
from partnd.models import PatchClassifier, SequenceClassifier, create_encoder
from partnd.recipes.sleep_study import DEMO_ENCODER_OVERRIDES


def _timed(steps: dict[str, Callable[[], Any]], repeats: int, warmup: int) -> dict[str, float]:
    """Median seconds per call of every function, timed in turns."""
    for _ in range(warmup):
        for step in steps.values():
            step()
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--context", type=int, default=21, help="windows per sequence L")
    parser.add_argument("--sequences", type=int, default=8, help="sequences per step B")
    parser.add_argument("--night", type=int, default=900, help="windows of the predicted night")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--precision", choices=PRECISIONS, default="auto")
    args = parser.parse_args()
    args.precision = resolve_precision(args.precision, "cpu")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    channels, samples = 6, 3000
    window = create_encoder(
        "vit_eeg_12m", in_chans=channels, patch_size=100, ndim=1, **DEMO_ENCODER_OVERRIDES
    )
    sequence = SequenceClassifier.from_window_encoder(
        window, 5, context=args.context, window_samples=samples
    )
    single = PatchClassifier(window, 5, spatial_shape=(samples,))
    count = args.sequences * args.context
    x = torch.randn(args.sequences, args.context, channels, samples)
    labels = torch.randint(0, 5, (args.sequences, args.context))

    def trainer(model: torch.nn.Module, forward: Callable[[], torch.Tensor]) -> Callable[[], None]:
        optimizer = build_optimizer(model, lr=1e-4, weight_decay=0.05, betas=(0.9, 0.95))

        def step() -> None:
            with autocast("cpu", args.precision):
                loss = F.cross_entropy(forward().float().flatten(0, -2), labels.flatten())
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

        return step

    train = _timed(
        {
            "sequence": trainer(sequence, lambda: sequence(x)),
            "single": trainer(single, lambda: single(x.flatten(0, 1))),
        },
        args.repeats,
        warmup=1,
    )
    night = torch.randn(args.night, channels, samples)
    sequence.eval()
    single.eval()

    @torch.no_grad()
    def predict_single() -> None:
        for chunk in night.split(256):
            single(chunk).float().softmax(-1)

    @torch.no_grad()
    def predict_sequence() -> None:
        sequence.predict_night(night)

    predict = _timed(
        {"sequence": predict_sequence, "single": predict_single}, max(2, args.repeats // 2), 1
    )
    print(
        f"{args.threads} threads, {args.precision}, window ViT "
        f"{DEMO_ENCODER_OVERRIDES['embed_dim']}x{DEMO_ENCODER_OVERRIDES['depth']}, temporal_small, "
        f"L={args.context}, B={args.sequences} ({count} windows per step)"
    )
    print("| measurement | sequence | single-window | ratio |")
    print("|---|---|---|---|")
    seq_rate, single_rate = count / train["sequence"], count / train["single"]
    print(
        f"| training step (windows/s) | {seq_rate:.1f} | {single_rate:.1f} | "
        f"{seq_rate / single_rate:.3f} |"
    )
    seq_night, single_night = args.night / predict["sequence"], args.night / predict["single"]
    print(
        f"| whole-night prediction, {args.night} windows (windows/s) | {seq_night:.0f} | "
        f"{single_night:.0f} | {seq_night / single_night:.3f} |"
    )


if __name__ == "__main__":
    main()
