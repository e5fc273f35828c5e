"""What a PART-across-windows pretraining learned, by hour of the night it reads.

Loads a finished pretraining run (``--run``: its ``config.json`` and ``checkpoints/last.pt``) and
prints its held-out pretext error over the content-free floor (1.0: nothing read from content)
on non-overlapping segments of each store given, split into the first hour of each night (sleep
onset: wake, then N1, N2 and N3 in a fixed order) and the later hours, next to an untrained model
of the same shape. Each value is the mean of three seeded evaluations of the same segments
(:class:`partnd.evaluation.PretextMonitor`).

It answers whether the pretext learned the night or only its stereotyped start: the demo cohort's
2-h records hold sleep onset and the first cycle, so a segment's window order is largely given by
the descent into sleep; in the later hours of a full night it is not.

Usage::

    partnd cohort --out /tmp/long8 --records 3 --hours 8 --seed 5
    partnd preprocess --src /tmp/long8 --out /tmp/long8.zarr
    python benchmarks/bench_pretext_by_hour.py --run runs/se/pretrain/part_windows \\
        --store runs/se/store.zarr --records $(jq -r '.test[]' runs/se/split.json) \\
        --store /tmp/long8.zarr
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from partnd.data import SignalSpec
from partnd.datasets.segments import SleepSegmentDataset
from partnd.datasets.store import SleepStore
from partnd.engine.checkpoint import load_checkpoint
from partnd.engine.config import PretrainConfig
from partnd.evaluation import PretextMonitor
from partnd.objectives import build_objective

SEEDS = (0, 1, 2)


def heldout_error(model: torch.nn.Module, items: torch.Tensor) -> float:
    """Mean pretext error over its floor of ``model`` on ``items`` ``[N, C, S*T]`` (3 seeds)."""
    values = [
        PretextMonitor(items, max_items=None, batch_size=8, seed=seed)(model, 0)["heldout_error"]
        for seed in SEEDS
    ]
    return float(np.mean(values))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, required=True, help="a part_windows pretraining run")
    parser.add_argument("--store", type=Path, action="append", required=True, help="repeatable")
    parser.add_argument(
        "--records", nargs="+", action="append", help="records of the preceding --store"
    )
    args = parser.parse_args()
    config = PretrainConfig.from_json(args.run / "config.json")
    if config.method != "part_windows":
        parser.error(f"--run: expected a part_windows pretraining, got {config.method!r}")
    segment = config.segment_windows
    state = load_checkpoint(args.run / "checkpoints" / "last.pt", "--run")
    models: dict[str, torch.nn.Module] = {}
    records = list(args.records or []) + [None] * len(args.store)
    print("| store | hours of the night | segments | trained | untrained |")
    print("|---|---|---|---|---|")
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
            items = torch.stack(data.__getitems__([int(i) for i in index]))
            trained, untrained = (heldout_error(models[n], items) for n in ("trained", "untrained"))
            print(
                f"| {store.name} | {label} | {len(index)} | {trained:.3f} | {untrained:.3f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
