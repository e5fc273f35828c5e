"""Benchmark: the night classifier and the sequence classifier against the single-window one.

Two measurements, side by side in one run (interleaved A, B, C, A, B, C, ...):

* **training step**: one optimiser step (window encoder, temporal encoder, head, loss over every
  window, backward, AdamW) of the sequence classifier on ``B`` sequences of ``L`` windows, of the
  night classifier on ``--crops`` crops of ``--crop`` windows with their time of night (the demo's
  night arm), and of the single-window classifier (the same window encoder on the grid, [CLS]
  head) on the sequence step's ``B * L`` windows; reported as windows/s, with the ratio of each to
  the single-window step (1.0: the temporal level costs nothing). The sequence step reads
  ``B * L`` windows and the night step ``crops * crop``: compare windows/s, and steps/s for what a
  step budget costs;
* **whole-night prediction**: windows per second of :meth:`NightClassifier.predict_night` (every
  window embedded once, the whole night read in one pass), of
  :meth:`SequenceClassifier.predict_night` (every window embedded once, every run of ``L``
  windows read, probabilities averaged) and of the single-window classifier on the same night.

Defaults are the demo's models (the window ViT of ``vit_eeg_12m``'s shape narrowed as the demo's,
``temporal_small``, ``L = 21`` at 8 sequences a step, crops of 120 windows at 2 a step, 6 x 3000
windows) on the CPU; training steps run under the precision the demo trains with (``--precision
auto``: bf16 where the CPU has bf16 kernels, else fp32), prediction in fp32 as
:func:`partnd.predict` runs it.

Usage::

    python benchmarks/bench_sequence.py
    python benchmarks/bench_sequence.py --context 21 --sequences 8 --crop 120 --crops 2 \
        --night 900 --threads 2
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

from partnd.datasets.nights import time_of_night
from partnd.engine.optim import build_optimizer
from partnd.engine.precision import PRECISIONS, autocast, resolve_precision
from partnd.models import NightClassifier, PatchClassifier, SequenceClassifier, create_encoder
from partnd.recipes.bench_support import interleaved_times
from partnd.recipes.sleep_study import DEMO_ENCODER_OVERRIDES


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--context", type=int, default=21, help="windows per sequence L")
    parser.add_argument("--sequences", type=int, default=8, help="sequences per step B")
    parser.add_argument("--crop", type=int, default=120, help="windows per night crop")
    parser.add_argument("--crops", type=int, default=2, help="night crops per step")
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
    night_model = NightClassifier.from_window_encoder(window, 5, window_samples=samples)
    single = PatchClassifier(window, 5, spatial_shape=(samples,))
    count = args.sequences * args.context
    crop_count = args.crops * args.crop
    x = torch.randn(args.sequences, args.context, channels, samples)
    labels = torch.randint(0, 5, (args.sequences, args.context))
    crops = torch.randn(args.crops, args.crop, channels, samples)
    crop_labels = torch.randint(0, 5, (args.crops, args.crop))
    crop_time = time_of_night(np.arange(args.crop) * 30.0 + 1800.0, 30.0)
    crop_time = crop_time.expand(args.crops, -1, -1)

    def trainer(
        model: torch.nn.Module, forward: Callable[[], torch.Tensor], target: torch.Tensor
    ) -> Callable[[], None]:
        optimizer = build_optimizer(model, lr=1e-4, weight_decay=0.05, betas=(0.9, 0.95))

        def step() -> None:
            with autocast("cpu", args.precision):
                loss = F.cross_entropy(forward().float().flatten(0, -2), target.flatten())
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

        return step

    train = interleaved_times(
        {
            "night": trainer(night_model, lambda: night_model(crops, None, crop_time), crop_labels),
            "sequence": trainer(sequence, lambda: sequence(x), labels),
            "single": trainer(single, lambda: single(x.flatten(0, 1)), labels),
        },
        args.repeats,
        warmup=1,
        device=torch.device("cpu"),
    )
    night = torch.randn(args.night, channels, samples)
    night_time = time_of_night(np.arange(args.night) * 30.0, 30.0)
    night_model.eval()
    sequence.eval()
    single.eval()

    @torch.no_grad()
    def predict_single() -> None:
        for chunk in night.split(256):
            single(chunk).float().softmax(-1)

    @torch.no_grad()
    def predict_sequence() -> None:
        sequence.predict_night(night)

    @torch.no_grad()
    def predict_whole() -> None:
        night_model.predict_night(night, night_time)

    predict = interleaved_times(
        {"night": predict_whole, "sequence": predict_sequence, "single": predict_single},
        max(2, args.repeats // 2),
        1,
        torch.device("cpu"),
    )
    print(
        f"{args.threads} threads, {args.precision}, window ViT "
        f"{DEMO_ENCODER_OVERRIDES['embed_dim']}x{DEMO_ENCODER_OVERRIDES['depth']}, temporal_small; "
        f"sequence L={args.context}, B={args.sequences} ({count} windows per step); night "
        f"{args.crops} crops of {args.crop} ({crop_count} windows per step)"
    )
    print(
        "| measurement | night | sequence | single-window | night / single | sequence / single "
        "| night / sequence |"
    )
    print("|---|---|---|---|---|---|---|")
    rates = {
        "night": crop_count / train["night"],
        "sequence": count / train["sequence"],
        "single": count / train["single"],
    }
    steps = {name: 1.0 / seconds for name, seconds in train.items()}
    nights = {name: args.night / seconds for name, seconds in predict.items()}
    for name, values, digits in (
        ("training step (windows/s)", rates, 1),
        ("training step (steps/s)", steps, 3),
        (f"whole-night prediction, {args.night} windows (windows/s)", nights, 0),
    ):
        night_rate, seq_rate, single_rate = values["night"], values["sequence"], values["single"]
        print(
            f"| {name} | {night_rate:.{digits}f} | {seq_rate:.{digits}f} | "
            f"{single_rate:.{digits}f} | {night_rate / single_rate:.3f} | "
            f"{seq_rate / single_rate:.3f} | {night_rate / seq_rate:.3f} |"
        )


if __name__ == "__main__":
    main()
