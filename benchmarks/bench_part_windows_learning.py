"""Does PART across windows learn? Pretext error against its floor, and a frozen-feature probe.

Pretrains ``part_windows`` on the pretraining pool of a sleep study's split (segments of
``--segment-windows`` windows, ``--num-windows`` drawn per segment, anchored with
``--pos-mask-ratio`` hidden, or ``--plain``) for ``--steps`` optimiser steps, then reports:

* the pretext ``nmse`` (error over the error of the content-free floor: the predictor that knows
  the visible slots when anchored, the best constant when plain), mean of the last fifth of the
  logged steps;
* ``nmse_isolated``, the same ratio over the pairs whose two windows overlap no other drawn window
  (alike to ``nmse``: the error falls through content, not shared samples);
* the same objective's ``nmse`` on white-noise segments (its floor is 1 whatever it learned from
  sleep: below 1 would mean it matches the waveforms of overlapping windows, a shortcut);
* a linear probe (Banville et al.'s protocol, :func:`partnd.evaluation.probes.linear_probe`) of the
  frozen window encoder against the same encoder before pretraining (its random initialisation):
  trained on the labelled windows of ``--probe-subjects``, evaluated on ``--val-subjects`` (both
  from the split's fine-tuning pool, never its test subjects);
* wall-clock minutes and seconds per step.

One JSON line per run is appended to ``--results``. Usage (the demo study's defaults)::

    python benchmarks/bench_part_windows_learning.py --study /tmp/demo_study \\
        --segment-windows 60 --num-windows 32 --pos-mask-ratio 0.5 --steps 150
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from partnd.datasets.segments import SleepSegmentDataset
from partnd.datasets.sleep_windows import InMemoryWindows
from partnd.datasets.splits import SubjectSplit
from partnd.engine.config import PretrainConfig
from partnd.engine.precision import autocast
from partnd.evaluation.probes import linear_probe
from partnd.objectives import CrossWindowPART, build_objective
from partnd.pretraining import pretrain
from partnd.recipes.sleep_study import DEMO_ENCODER_OVERRIDES
from partnd.signal_info import SignalSpec


def _config(args: argparse.Namespace, steps_per_epoch: int) -> PretrainConfig:
    return PretrainConfig(
        method="part_windows",
        encoder="vit_eeg_12m",
        encoder_overrides=DEMO_ENCODER_OVERRIDES,
        patch_size=100,
        window_samples=3000,
        segment_windows=args.segment_windows,
        num_windows=args.num_windows,
        temporal_encoder="temporal_small",
        pos_embed=not args.plain,
        pos_mask_ratio=args.pos_mask_ratio,
        head=args.head,
        num_pairs=args.num_pairs,
        batch_size=max(1, args.batch_windows // args.num_windows),
        epochs=max(1, math.ceil(args.steps / steps_per_epoch)),
        max_steps=args.steps,
        lr=args.lr,
        warmup_steps=max(1, args.steps // 10),
        precision="auto",
        seed=args.seed,
        log_every_steps=5,
        progress=False,
        device="cpu",
        normalize=args.normalize,
    )


@torch.no_grad()
def white_noise_nmse(model: CrossWindowPART, batches: int = 8, seed: int = 0) -> float:
    """The trained objective's ``nmse`` on white-noise segments (train mode: anchors hidden)."""
    generator = torch.Generator().manual_seed(seed)
    model.train()
    length = model.segment_windows * model.hierarchical.window_samples
    values = []
    for _ in range(batches):
        x = torch.randn(8, model.hierarchical.in_chans, length, generator=generator)
        with autocast("cpu", "auto"):
            values.append(float(model(x, generator=generator).metrics["nmse"]))
    model.eval()
    return float(np.mean(values))


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Pretrain, probe and return one result row."""
    split = SubjectSplit.load(Path(args.study) / "split.json")
    store = Path(args.study) / "store.zarr"
    assert not set(args.probe_subjects + args.val_subjects) & set(split.test)
    segments = SleepSegmentDataset(
        store,
        records=list(split.pretrain),
        segment_windows=args.segment_windows,
        normalize="record" if args.normalize == "record" else "none",
    )
    batch = max(1, args.batch_windows // args.num_windows)
    config = _config(args, max(1, len(segments) // batch))
    start = time.perf_counter()
    result = pretrain(segments, out_dir=Path(args.out), config=config, overwrite=True)
    minutes = (time.perf_counter() - start) / 60
    train = [r for r in result.history if r["phase"] == "train"]
    tail = train[-max(1, len(train) // 5) :]
    nmse = float(np.mean([r["nmse"] for r in tail]))
    nmse_isolated = float(np.mean([r["nmse_isolated"] for r in tail]))
    assert isinstance(result.model, CrossWindowPART)
    noise = white_noise_nmse(result.model)
    torch.manual_seed(config.seed)  # the same initialisation pretraining started from
    initial = build_objective(config, SignalSpec(segments.n_chans, (segments.n_times,)))
    assert isinstance(initial, CrossWindowPART)
    probe_train, probe_val = (
        InMemoryWindows(
            store, subjects=subjects, labelled_only=True, normalize=args.normalize, progress=False
        )
        for subjects in (args.probe_subjects, args.val_subjects)
    )
    learned = linear_probe(result.encoder, probe_train, probe_val).report.cohen_kappa
    random = linear_probe(initial.hierarchical.window, probe_train, probe_val).report.cohen_kappa
    row = {
        "normalize": args.normalize,
        "segment_windows": args.segment_windows,
        "num_windows": args.num_windows,
        "anchored": not args.plain,
        "pos_mask_ratio": None if args.plain else args.pos_mask_ratio,
        "head": args.head,
        "steps": len(train) and train[-1]["step"],
        "batch_segments": config.batch_size,
        "lr": args.lr,
        "minutes": round(minutes, 1),
        "seconds_per_step": round(60 * minutes / max(1, args.steps), 2),
        "nmse_over_floor": round(nmse, 3),
        "nmse_isolated_over_floor": round(nmse_isolated, 3),
        "white_noise_nmse": round(noise, 3),
        "probe_kappa": round(float(learned), 3),
        "probe_kappa_random": round(float(random), 3),
        "probe_gain": round(float(learned - random), 3),
    }
    with open(args.results, "a") as handle:
        handle.write(json.dumps(row) + "\n")
    return row


def main(argv: list[str] | None = None) -> None:
    """Parse options, run once and print the result row."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study", default="/tmp/demo_study", help="holds store.zarr, split.json")
    parser.add_argument("--segment-windows", type=int, default=60)
    parser.add_argument("--num-windows", type=int, default=32)
    parser.add_argument("--pos-mask-ratio", type=float, default=0.5)
    parser.add_argument("--plain", action="store_true", help="no temporal position embedding")
    parser.add_argument("--head", default="cross_attention", choices=PretrainConfig.HEADS)
    parser.add_argument("--num-pairs", type=int, default=512)
    parser.add_argument("--batch-windows", type=int, default=512, help="windows per step")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--normalize",
        choices=("window", "record"),
        default="record",
        help="windows normalised on their own or by their night's channel scales",
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--probe-subjects", nargs="+", default=["tr10-0165", "tr13-6708"])
    parser.add_argument("--val-subjects", nargs="+", default=["tr10-6318", "tr11-6355"])
    parser.add_argument("--out", default="runs/part_windows_learning")
    parser.add_argument("--results", default="runs/part_windows_learning.jsonl")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(json.dumps(run(args)))


if __name__ == "__main__":
    main()
