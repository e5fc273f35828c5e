"""Float16 against float32 storage of a sleep store: disk, speed, values, and what training sees.

Preprocesses the same PC18-format recordings (``--src``; default: ``--records`` nights of
``--hours`` generated with the sample cohort generator) into a float32 and a float16 store and
prints, side by side:

1. preprocessing wall time and disk size;
2. read throughput: windows/s of chunk reads of every record;
3. value differences: the largest ``|x16 - x32|`` in µV and relative to the channel's scale, and
   after the record and window normalisations the models read (normalised units);
4. a small PART-across-windows pretraining of the demo encoder on each store (same seed, same
   steps): the pretext ``nmse`` of the last logged steps and the held-out pretext error of the
   final weights on the same segments of the same store; then a linear probe of each frozen
   window encoder (labelled windows of the first half of the nights, kappa on the other half).

Usage::

    OMP_NUM_THREADS=2 python benchmarks/bench_store_dtype.py --records 6 --hours 2 --steps 100
    python benchmarks/bench_store_dtype.py --src /data/physionet2018 --records-limit 20
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from partnd.cohort.pc18_cohort import make_pc18_cohort
from partnd.datasets.segments import SleepSegmentDataset
from partnd.datasets.sleep_windows import InMemoryWindows, SleepWindowDataset
from partnd.datasets.store import SleepStore
from partnd.engine.config import PretrainConfig
from partnd.engine.normalization import instance_normalize, record_normalize
from partnd.evaluation.probes import PretextMonitor, linear_probe
from partnd.preprocessing.physionet2018 import preprocess_physionet2018
from partnd.pretraining import pretrain
from partnd.recipes.sleep_study import DEMO_ENCODER_OVERRIDES

DTYPES = ("float32", "float16")


def disk_bytes(path: Path) -> int:
    """Bytes of every file under ``path``."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def read_rate(store: SleepStore) -> float:
    """Windows/s of reading every record whole (chunk decodes)."""
    start, count = time.perf_counter(), 0
    for record in store.record_ids():
        count += len(store.read_windows(record, 0, store.n_windows(record)))
    return count / (time.perf_counter() - start)


def differences(low: SleepStore, high: SleepStore) -> dict[str, float]:
    """Largest differences between the stores' windows, raw and as the models read them."""
    worst = {"uv": 0.0, "relative": 0.0, "record_norm": 0.0, "window_norm": 0.0}
    for record in high.record_ids():
        x32 = torch.from_numpy(high.read_windows(record, 0, high.n_windows(record)))
        x16 = torch.from_numpy(low.read_windows(record, 0, low.n_windows(record)))
        scale = torch.from_numpy(high.channel_scale(record).astype(np.float32))
        diff = (x16 - x32).abs()
        worst["uv"] = max(worst["uv"], float(diff.max()))
        worst["relative"] = max(worst["relative"], float((diff / scale[:, None]).max()))
        record_diff = record_normalize(x16, scale) - record_normalize(x32, scale)
        worst["record_norm"] = max(worst["record_norm"], float(record_diff.abs().max()))
        window_diff = instance_normalize(x16) - instance_normalize(x32)
        worst["window_norm"] = max(worst["window_norm"], float(window_diff.abs().max()))
    return worst


def train_and_probe(store: SleepStore, steps: int, out: Path) -> dict[str, float]:
    """A small PART-across-windows pretraining on every night, its pretext errors, and a linear
    probe of the frozen window encoder (first half of the labelled nights against the rest)."""
    config = PretrainConfig.preset(
        "eeg_sleep_windows",
        encoder_overrides=DEMO_ENCODER_OVERRIDES,
        epochs=1,
        min_steps=steps,
        batch_size=8,
        num_pairs=256,
        lr=1e-3,
        warmup_steps=min(50, steps // 4),
        precision="fp32",
        progress=False,
        log_every_steps=max(1, steps // 10),
        normalize="record",
        seed=0,
    )
    records = store.record_ids()
    data = SleepWindowDataset(store, records=records, normalize="record")
    torch.manual_seed(0)
    result = pretrain(data, out_dir=out, config=config, overwrite=True)
    train = [r for r in result.history if r["phase"] == "train"]
    tail = train[-max(1, len(train) // 5) :]
    segments = SleepSegmentDataset(
        store,
        segment_windows=config.segment_windows,
        stride=config.segment_windows,
        normalize="record",
    )
    heldout = PretextMonitor(segments, max_items=32, batch_size=8, seed=0)(result.model, 0)
    labelled = store.record_ids(labelled_only=True)
    half = len(labelled) // 2
    quiet: dict[str, Any] = {"normalize": "record", "progress": False}
    probe = linear_probe(
        result.encoder,
        InMemoryWindows(store, records=labelled[:half], labelled_only=True, **quiet),
        InMemoryWindows(store, records=labelled[half:], labelled_only=True, **quiet),
        seed=0,
    )
    return {
        "nmse_last_fifth": float(np.mean([r["nmse"] for r in tail])),
        "heldout_error": heldout["heldout_error"],
        "probe_kappa": probe.report.cohen_kappa,
    }


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print the comparison (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, default=None, help="PC18-format root")
    parser.add_argument("--records", type=int, default=6, help="generated nights (no --src)")
    parser.add_argument("--hours", type=float, default=2.0, help="generated night length")
    parser.add_argument("--seed", type=int, default=3, help="generator seed")
    parser.add_argument("--steps", type=int, default=100, help="pretraining steps per store")
    parser.add_argument("--n-jobs", type=int, default=1, help="preprocessing workers")
    parser.add_argument("--keep", type=Path, default=None, help="keep the stores in this folder")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench_store_dtype_"))
    try:
        src = args.src
        if src is None:
            started = time.perf_counter()
            src = make_pc18_cohort(
                work / "cohort",
                n_records=args.records,
                hours=args.hours,
                seed=args.seed,
                test_fraction=0.0,
                n_jobs=args.n_jobs,
                progress=False,
            ).root
            seconds = time.perf_counter() - started
            size = disk_bytes(src) / 1e6
            print(
                f"generated {args.records} nights of {args.hours:g} h: {seconds:.0f} s, "
                f"{size:.0f} MB"
            )
        folder = args.keep or work
        stores: dict[str, SleepStore] = {}
        rows: dict[str, dict[str, Any]] = {}
        for dtype in DTYPES:
            path = folder / f"store_{dtype}.zarr"
            shutil.rmtree(path, ignore_errors=True)
            started = time.perf_counter()
            preprocess_physionet2018(src, path, dtype=dtype, n_jobs=args.n_jobs, progress=False)
            seconds = time.perf_counter() - started
            stores[dtype] = SleepStore(path)
            rows[dtype] = {
                "preprocess_s": seconds,
                "disk_mb": disk_bytes(path) / 1e6,
                "read_windows_per_s": read_rate(stores[dtype]),
            }
        worst = differences(stores["float16"], stores["float32"])
        for dtype in DTYPES:
            rows[dtype].update(train_and_probe(stores[dtype], args.steps, work / f"run_{dtype}"))
        hours = sum(
            s * 30 / 3600 for s in map(stores["float32"].n_windows, stores["float32"].record_ids())
        )
        print(f"{len(stores['float32'].record_ids())} records, {hours:.1f} h of stored windows")
        print(f"{'':<28}{'float32':>12}{'float16':>12}{'ratio':>9}")
        for key in rows["float32"]:
            a, b = rows["float32"][key], rows["float16"][key]
            print(f"{key:<28}{a:>12.4g}{b:>12.4g}{b / a if a else float('nan'):>9.3f}")
        print(
            f"largest |float16 - float32|: {worst['uv']:.4g} µV, {worst['relative']:.2e} of the "
            f"channel scale; after record normalisation {worst['record_norm']:.2e}, after window "
            f"normalisation {worst['window_norm']:.2e} (normalised units)"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
