"""Throughput of the sleep-window training loader against the rate a training step consumes windows.

Measures, on a partnd sleep store (a synthetic one is built in a temporary folder unless ``--store``
is given):

1. zarr decode cost: one 64-window chunk read vs one single-window read (which decodes a chunk too);
2. windows/s of ``DataLoader`` configurations, each with 1 worker and with several: naive
   (``RandomSampler``, no chunk cache, window-by-window fetches), the same with batched fetches
   (``__getitems__`` decodes each chunk a batch touches once) and chunk-aware
   (:class:`ChunkShuffleSampler` + chunk cache + batched fetches);
3. windows/s one training step consumes: 40 off-grid 1 s patches (6 × 100) per window are cut with
   ``partnd.patches.sampling.OffGridSampler`` and pass forward + backward + AdamW through the
   paper's
   12.9 M-parameter ``vit_eeg_12m`` encoder (fp32, batch 256 by default).

It prints each loader's windows/s, the training steps/s it could feed, and the ratio
loader / consumption (the goal is >= 5 on one worker, so that loading never limits training).

Example::

    OMP_NUM_THREADS=1 python benchmarks/bench_loader.py --records 4 --windows 320 --workers 1 2
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, RandomSampler, Sampler

from partnd.datasets.sleep_windows import SleepWindowDataset
from partnd.datasets.store import SleepStore
from partnd.engine.sampler import ChunkShuffleSampler
from partnd.models.registry import create_encoder
from partnd.patches.sampling import OffGridSampler
from partnd.recipes.bench_support import (
    SYNTHETIC_CHANNELS,
    SYNTHETIC_SFREQ,
    SYNTHETIC_WINDOW_SECONDS,
    build_synthetic_store,
)

__all__ = [
    "main",
    "measure_decode",
    "measure_loader",
    "measure_training_step",
]

LOADERS = (
    "per-window reads, RandomSampler",
    "batched reads, RandomSampler",
    "ChunkShuffleSampler + chunk cache",
)


class _PerWindow(Dataset[tuple[torch.Tensor, int]]):
    """Hides ``__getitems__``: the ``DataLoader`` then fetches window by window (naive baseline)."""

    def __init__(self, dataset: SleepWindowDataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        x, stage = self.dataset[index][:2]
        return x, stage


def measure_decode(store: SleepStore, n_reads: int = 20, seed: int = 0) -> dict[str, float]:
    """Median milliseconds of a whole-chunk read and of a single-window read (random positions)."""
    rng = np.random.default_rng(seed)
    records = store.record_ids()
    chunk_ms, window_ms = [], []
    for _ in range(n_reads):
        record_id = records[rng.integers(len(records))]
        size = store.chunk_windows(record_id)
        n_chunks = store.n_windows(record_id) // size
        chunk = int(rng.integers(n_chunks))
        start = time.perf_counter()
        store.read_windows(record_id, chunk * size, (chunk + 1) * size)
        chunk_ms.append((time.perf_counter() - start) * 1e3)
        window = int(rng.integers(store.n_windows(record_id)))
        start = time.perf_counter()
        store.read_windows(record_id, window, window + 1)
        window_ms.append((time.perf_counter() - start) * 1e3)
    size = store.chunk_windows(records[0])
    return {
        "chunk_windows": float(size),
        "chunk_ms": float(np.median(chunk_ms)),
        "chunk_ms_per_window": float(np.median(chunk_ms)) / size,
        "single_window_ms": float(np.median(window_ms)),
    }


def measure_loader(
    dataset: Dataset[Any],
    sampler: Sampler[int],
    *,
    num_workers: int,
    batch_size: int,
    max_windows: int,
) -> float:
    """Windows/s delivered by a ``DataLoader``, timed after its first batch (worker start-up)."""
    loader = DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=sampler,
        num_workers=num_workers,
        persistent_workers=False,
        prefetch_factor=2 if num_workers > 0 else None,
    )
    iterator = iter(loader)
    next(iterator)
    count = 0
    start = time.perf_counter()
    for x, _ in iterator:
        count += len(x)
        if count >= max_windows:
            break
    elapsed = time.perf_counter() - start
    del iterator
    return count / elapsed


def measure_training_step(
    batch_size: int, steps: int, device: str, *, seed: int = 0
) -> dict[str, float]:
    """Windows/s of a fp32 training step of ``vit_eeg_12m`` on 40 patches of 6 × 100 per window.

    Each step cuts the patches (``OffGridSampler(1, 100, num_patches=40)``, slot positions from the
    30-slot grid), runs forward, a mean-square loss on the tokens, backward and an AdamW update.
    """
    torch.manual_seed(seed)
    model = create_encoder(
        "vit_eeg_12m", in_chans=len(SYNTHETIC_CHANNELS), patch_size=100, ndim=1, num_positions=30
    ).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    sampler = OffGridSampler(1, 100, num_patches=40)
    x = torch.randn(
        batch_size,
        len(SYNTHETIC_CHANNELS),
        int(SYNTHETIC_SFREQ * SYNTHETIC_WINDOW_SECONDS),
        device=device,
    )

    def step() -> None:
        patches = sampler(x)
        tokens = model.forward_features(patches.patches, patches.grid_index)
        loss = tokens.pow(2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    step()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    return {
        "parameters_m": sum(p.numel() for p in model.parameters()) / 1e6,
        "windows_per_s": batch_size * steps / elapsed,
        "step_s": elapsed / steps,
    }


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--store", type=Path, help="existing store (default: build a synthetic one)"
    )
    parser.add_argument("--records", type=int, default=20, help="synthetic store: records")
    parser.add_argument("--windows", type=int, default=960, help="synthetic store: windows/record")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--buffer-chunks", type=int, default=4)
    parser.add_argument("--max-windows", type=int, default=4096, help="windows timed per loader")
    parser.add_argument("--steps", type=int, default=3, help="timed training steps")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None, help="torch threads of the step")
    parser.add_argument("--no-progress", action="store_true")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    """Run the benchmark and print a table (see the module docstring)."""
    args = _parse(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="bench_loader_") as temporary:
        if args.store is None:
            store = build_synthetic_store(
                Path(temporary) / "synthetic.zarr",
                args.records,
                args.windows,
                progress=not args.no_progress,
            )
        else:
            store = SleepStore(args.store)
        n_windows = sum(store.n_windows(r) for r in store.record_ids())
        print(f"store: {len(store.record_ids())} records, {n_windows} windows, {store.path}")
        decode = measure_decode(store)
        print(
            f"decode: chunk of {decode['chunk_windows']:.0f} windows {decode['chunk_ms']:.2f} ms "
            f"({decode['chunk_ms_per_window']:.3f} ms/window); single-window read "
            f"{decode['single_window_ms']:.2f} ms "
            f"({decode['single_window_ms'] / decode['chunk_ms_per_window']:.0f}x per window)"
        )
        consumption = measure_training_step(args.batch_size, args.steps, args.device)
        print(
            f"training step ({consumption['parameters_m']:.2f} M params, batch {args.batch_size}, "
            f"{args.device}, fp32): {consumption['step_s']:.2f} s/step = "
            f"{consumption['windows_per_s']:.0f} windows/s"
        )
        max_windows = min(args.max_windows, n_windows - args.batch_size)
        print(f"{'loader':<36}{'workers':>8}{'windows/s':>12}{'steps/s':>10}{'ratio':>9}")
        for name in LOADERS:
            chunked = name.startswith("Chunk")
            for workers in args.workers:
                dataset = SleepWindowDataset(store, cache_bytes=(64 * 2**20 if chunked else 0))
                sampler: Sampler[int] = (
                    ChunkShuffleSampler(
                        dataset,
                        shuffle_buffer_chunks=args.buffer_chunks,
                        batch_size=args.batch_size,
                        num_workers=workers,
                    )
                    if chunked
                    else RandomSampler(dataset, generator=torch.Generator().manual_seed(0))
                )
                rate = measure_loader(
                    _PerWindow(dataset) if name.startswith("per-window") else dataset,
                    sampler,
                    num_workers=workers,
                    batch_size=args.batch_size,
                    max_windows=max_windows,
                )
                ratio = rate / consumption["windows_per_s"]
                steps = rate / args.batch_size
                print(f"{name:<36}{workers:>8}{rate:>12.0f}{steps:>10.2f}{ratio:>9.1f}")


if __name__ == "__main__":
    main()
