"""What a PART-across-windows pretraining learned, by hour of the night it reads.

Loads a finished pretraining run (``--run``: its ``config.json`` and ``checkpoints/last.pt``) and
prints its held-out pretext error over the content-free floor (1.0: nothing read from content)
on non-overlapping segments of each store given, split into the first hour of each night (sleep
onset: wake, then N1, N2 and N3 in a fixed order) and the later hours, next to an untrained model
of the same shape. Each value is the mean of three seeded evaluations of the same segments
(:class:`partnd.evaluation.probes.PretextMonitor`).

It answers whether the pretext learned the night or only its stereotyped start: the demo cohort's
2-h records hold sleep onset and the first cycle, so a segment's window order is largely given by
the descent into sleep; in the later hours of a full night it is not.

``--surrogate`` adds rows where every channel of the segments is replaced, block by block, by a
phase-randomised copy (same amplitude spectrum, uniform random phases; the zero and Nyquist bins
kept): ``window`` blocks of one stored window keep each window's power spectrum and destroy its
waveform, ``patch`` blocks of one patch (1 s) keep what a spectral front-end reads of each tile.
The error that remains is what the pretext reads from spectra; the rise is what it reads from
waveforms (transients, phase), a content that a generator could also leak.

Usage::

    partnd cohort --out /tmp/long8 --records 3 --hours 8 --seed 5
    partnd preprocess --src /tmp/long8 --out /tmp/long8.zarr
    python benchmarks/bench_pretext_by_hour.py --run runs/se/pretrain/part_windows \\
        --store runs/se/store.zarr --records $(jq -r '.test[]' runs/se/split.json) \\
        --store /tmp/long8.zarr --surrogate window patch
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from partnd.datasets.segments import SleepSegmentDataset
from partnd.datasets.store import SleepStore
from partnd.engine.checkpoint import load_checkpoint
from partnd.engine.config import PretrainConfig
from partnd.engine.run_dir import RunDir
from partnd.evaluation.probes import PretextMonitor
from partnd.objectives import build_objective
from partnd.signal_info import SignalSpec

SEEDS = (0, 1, 2)


def heldout_error(model: torch.nn.Module, items: torch.Tensor) -> float:
    """Mean pretext error over its floor of ``model`` on ``items`` ``[N, C, S*T]`` (3 seeds)."""
    values = [
        PretextMonitor(items, max_items=None, batch_size=8, seed=seed)(model, 0)["heldout_error"]
        for seed in SEEDS
    ]
    return float(np.mean(values))


def phase_randomised(items: torch.Tensor, block: int, seed: int = 0) -> torch.Tensor:
    """``items: [N, C, L]`` with every run of ``block`` samples of every channel replaced by a
    copy of the same amplitude spectrum and uniform random phases (``L`` a multiple of ``block``;
    the zero-frequency bin, and the Nyquist bin of an even block, keep their value)."""
    n, c, length = items.shape
    blocks = items.reshape(n, c, length // block, block).double().numpy()
    spectrum = np.fft.rfft(blocks, axis=-1)
    phases = np.random.default_rng(seed).uniform(0.0, 2 * np.pi, spectrum.shape)
    shuffled = np.abs(spectrum) * np.exp(1j * phases)
    kept = [0, -1] if block % 2 == 0 else [0]
    shuffled[..., kept] = spectrum[..., kept]
    out = np.fft.irfft(shuffled, n=block, axis=-1).reshape(n, c, length)
    return torch.from_numpy(out).to(items.dtype)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, required=True, help="a part_windows pretraining run")
    parser.add_argument("--store", type=Path, action="append", required=True, help="repeatable")
    parser.add_argument(
        "--records", nargs="+", action="append", help="records of the preceding --store"
    )
    parser.add_argument(
        "--surrogate",
        nargs="+",
        choices=("window", "patch"),
        default=[],
        help="also score phase-randomised segments, per stored window and/or per patch",
    )
    args = parser.parse_args()
    config = PretrainConfig.from_json(args.run / "config.json")
    if config.method != "part_windows":
        parser.error(f"--run: expected a part_windows pretraining, got {config.method!r}")
    segment = config.segment_windows
    state = load_checkpoint(RunDir(args.run).last_checkpoint, "--run")
    models: dict[str, torch.nn.Module] = {}
    records = list(args.records or []) + [None] * len(args.store)
    blocks = {"window": config.window_samples, "patch": int(np.prod(config.patch_size))}
    print("| store | hours of the night | signal | segments | trained | untrained |")
    print("|---|---|---|---|---|---|")
    for store, chosen in zip(args.store, records, strict=False):
        data = SleepSegmentDataset(
            store, records=chosen, segment_windows=segment, stride=segment, normalize="record"
        )
        if not models:  # shaped by the first segment: [C, S*T]
            spec = SignalSpec(int(data[0].shape[0]), (segment * config.window_samples,))
            torch.manual_seed(0)
            models = {"untrained": build_objective(config, spec)}
            models["trained"] = build_objective(config, spec)
            models["trained"].load_state_dict(state["model"])
        hour = (data.segments[:, 1] * SleepStore(store).window_seconds // 3600).astype(int)
        for label, mask in (("first (sleep onset)", hour == 0), ("later", hour > 0)):
            index = np.flatnonzero(mask)
            if len(index) == 0:
                continue
            original = torch.stack(data.__getitems__([int(i) for i in index]))
            signals = {"original": original}
            for name in args.surrogate:
                signals[f"phase-randomised per {name}"] = phase_randomised(original, blocks[name])
            for signal, items in signals.items():
                trained = heldout_error(models["trained"], items)
                untrained = heldout_error(models["untrained"], items)
                print(
                    f"| {store.name} | {label} | {signal} | {len(index)} | {trained:.3f} "
                    f"| {untrained:.3f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
